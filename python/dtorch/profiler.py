"""dtorch.profiler: one Chrome/Perfetto trace of a region of a program.

    with dtorch.profiler.profile("trace.json"):
        loss = train_step()
        loss.item()

writes one trace with, on one timeline:

* process ``client``: thread ``python`` (fetches and `record_function`
  spans of this interpreter) and thread ``session`` (every op recorded,
  every segment cut, every fetch, in the C++ session);
* process ``controller``: thread ``controller`` (per segment: cache lookup,
  compile, upload, run send; puts, frees, fetch requests, synchronize) and
  thread ``replies`` (a fetch's pieces reaching the client, with their
  bytes);
* one process ``rank N`` per rank: thread ``compute`` (each run of a program
  and each kernel it runs) and thread ``comm`` (each collective), with the
  op name, the instruction's source location and its bytes (output bytes of
  a kernel, bytes moved by a collective for that rank).

Open it at https://ui.perfetto.dev or chrome://tracing (docs/guide/profiling.md).

Clock: every event is dated with CLOCK_MONOTONIC (Python's
``time.monotonic_ns()``, C++'s steady_clock), which all processes of one
host share, so local workers need no conversion; a worker on another host
answers the collection with its clock and its events are shifted by the
offset measured by that round trip. Times in the file are microseconds since
the profile started.

Off, the profiler costs one flag check per op and per instruction. On, each
rank and the client keep at most ``max_events_per_rank`` events; the rest are
counted (``"dropped"`` in the trace's ``otherData``).
"""
import json
import os
import threading
import time

from . import _C

__all__ = ["profile", "record_function", "load", "spans", "overlaps", "check_streams"]

#: Events each rank (and the client) keeps at most while profiling.
DEFAULT_MAX_EVENTS_PER_RANK = 1 << 17

_CLIENT_PID = 1
_CONTROLLER_PID = 2
_RANK_PID_BASE = 100
_THREAD_IDS = {"python": 1, "session": 2, "controller": 1, "replies": 2, "compute": 1,
               "comm": 2}

# The profile currently recording (at most one); None when off.
_active = None
_lock = threading.Lock()


class profile:
    """Profiles the client, the controller and every rank while active.

    A context manager (``with profile(path): ...``) or explicit
    ``start()`` / ``stop()``. On stop the events of every rank are collected
    (queued behind all work submitted so far, so every run of the region is
    in it) and the trace is written to ``path`` when one was given; the
    trace (a dict in the Chrome trace event format) is also kept as
    ``self.trace``.

    Args:
        path (str or os.PathLike, optional): where to write the JSON trace.
        max_events_per_rank (int): events each rank and the client keep at
            most; later ones are dropped and counted.

    Raises:
        RuntimeError: another profile is active.

    Example:
        >>> import dtorch, json, os, tempfile
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> path = os.path.join(tempfile.mkdtemp(), "trace.json")
        >>> with dtorch.profiler.profile(path):
        ...     _ = (dtorch.ones(4, 4, device_mesh=mesh, placements=[dtorch.Shard(0)]) * 2).sum().item()
        >>> names = {e["name"] for e in json.load(open(path))["traceEvents"]}
        >>> "mul" in names
        True
    """

    def __init__(self, path=None, *, max_events_per_rank=DEFAULT_MAX_EVENTS_PER_RANK):
        if not isinstance(max_events_per_rank, int) or max_events_per_rank < 1:
            raise ValueError(f"max_events_per_rank must be a positive int, got {max_events_per_rank!r}")
        self.path = None if path is None else os.fspath(path)
        self.max_events = max_events_per_rank
        self.trace = None
        self._python = []
        self._python_dropped = 0
        self._start_ns = None
        self._running = False

    def start(self):
        """Starts recording everywhere (waits until every rank records).

        Example:
            >>> prof = profile().start()
            >>> trace = prof.stop()
            >>> sorted(trace["otherData"]["dropped"])[:1]
            ['client']
        """
        global _active
        from . import _runtime
        _runtime.ensure_initialized()
        with _lock:
            # A profile left running by a session that ended no longer counts.
            if _active is not None and _C.profiler_active():
                raise RuntimeError("a dtorch profiler is already active")
            if _active is not None:
                _active._running = False
            _active = self
        try:
            self._python = []
            self._python_dropped = 0
            self._start_ns = time.monotonic_ns()
            _C.profiler_start(self.max_events)
        except BaseException:
            with _lock:
                _active = None
            raise
        self._running = True
        return self

    def stop(self):
        """Stops recording, collects every event and writes the trace.

        Returns:
            dict: the trace (``{"traceEvents": [...], ...}``).

        Example:
            >>> prof = profile().start()
            >>> "traceEvents" in prof.stop()
            True
        """
        global _active
        if not self._running:
            raise RuntimeError("this profile is not running")
        self._running = False
        with _lock:
            _active = None
        collected = _C.profiler_stop()
        self.trace = _build_trace(collected, self._python, self._python_dropped, self._start_ns)
        if self.path is not None:
            self.export_chrome_trace(self.path)
        return self.trace

    def export_chrome_trace(self, path):
        """Writes the trace of the last `stop` to `path` (torch.profiler's
        name for it).

        Example:
            >>> import os, tempfile
            >>> with profile() as prof:
            ...     pass
            >>> path = os.path.join(tempfile.mkdtemp(), "again.json")
            >>> prof.export_chrome_trace(path)
            >>> load(path) == prof.trace
            True
        """
        if self.trace is None:
            raise RuntimeError("nothing to export: the profile has not stopped yet")
        with open(os.fspath(path), "w") as f:
            json.dump(self.trace, f)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if not self._running:
            return False
        try:
            self.stop()
        except Exception:
            if exc_type is None:
                raise  # a failure inside the region is the one to report
        return False

    def _record(self, name, category, start_ns, end_ns, nbytes=None):
        if len(self._python) >= self.max_events:
            self._python_dropped += 1
            return
        self._python.append((name, category, start_ns, end_ns, nbytes,
                             threading.current_thread().name))


class record_function:
    """A named span of your own on the client's ``python`` thread (a no-op
    when no profile is active); a context manager or a decorator.

    Example:
        >>> with record_function("data loading"):
        ...     pass
    """

    def __init__(self, name):
        self.name = str(name)
        self._start = None

    def __enter__(self):
        self._start = time.monotonic_ns() if _active is not None else None
        return self

    def __exit__(self, exc_type, exc, tb):
        prof = _active
        if prof is not None and self._start is not None:
            prof._record(self.name, "user", self._start, time.monotonic_ns())
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with record_function(self.name):
                return fn(*args, **kwargs)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        return wrapped


def _fetch_recorded(fetch, tensor, what):
    """`fetch(tensor)` with a span on the python thread when profiling (the
    hook of numpy(), item(), tolist())."""
    prof = _active
    if prof is None:
        return fetch(tensor)
    start = time.monotonic_ns()
    value = fetch(tensor)
    prof._record(what, "fetch", start, time.monotonic_ns(), getattr(value, "nbytes", None))
    return value


# --------------------------------------------------------------------------
# Building the Chrome trace

def _metadata(pid, tid, kind, value):
    args = {"name": value} if kind in ("process_name", "thread_name") else {"sort_index": value}
    event = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _span(name, category, start_ns, end_ns, pid, tid, origin_ns, args):
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "ts": (start_ns - origin_ns) / 1000.0,
        "dur": max(end_ns - start_ns, 0) / 1000.0,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _event_args(location, detail, nbytes):
    args = {}
    if nbytes is not None and nbytes >= 0:
        args["bytes"] = int(nbytes)
    if location:
        args["location"] = location
    if detail:
        args["detail"] = detail
    return args


def _build_trace(collected, python_events, python_dropped, origin_ns):
    events = [
        _metadata(_CLIENT_PID, None, "process_name", "client"),
        _metadata(_CLIENT_PID, None, "process_sort_index", 0),
        _metadata(_CLIENT_PID, _THREAD_IDS["python"], "thread_name", "python"),
        _metadata(_CLIENT_PID, _THREAD_IDS["session"], "thread_name", "session"),
        _metadata(_CONTROLLER_PID, None, "process_name", "controller"),
        _metadata(_CONTROLLER_PID, None, "process_sort_index", 1),
        _metadata(_CONTROLLER_PID, _THREAD_IDS["controller"], "thread_name", "controller"),
        _metadata(_CONTROLLER_PID, _THREAD_IDS["replies"], "thread_name", "replies"),
    ]
    spans = []
    for name, category, start, end, nbytes, thread in python_events:
        args = _event_args("", "" if thread == "MainThread" else f"thread {thread}", nbytes)
        spans.append(_span(name, category, start, end, _CLIENT_PID, _THREAD_IDS["python"],
                           origin_ns, args))
    for name, category, location, detail, start, end, nbytes, lane in collected["client"]:
        if lane in ("controller", "replies"):
            pid, tid = _CONTROLLER_PID, _THREAD_IDS[lane]
        else:
            pid, tid = _CLIENT_PID, _THREAD_IDS["session"]
        spans.append(_span(name, category, start, end, pid, tid, origin_ns,
                           _event_args(location, detail, nbytes)))
    dropped = {"client": int(collected["client_dropped"]) + python_dropped}
    ranks = []
    for chunk in collected["ranks"]:
        if not chunk["supported"]:
            continue  # simulated workers run nothing
        rank = int(chunk["rank"])
        ranks.append(rank)
        pid = _RANK_PID_BASE + rank
        events += [
            _metadata(pid, None, "process_name", f"rank {rank}"),
            _metadata(pid, None, "process_sort_index", 2 + rank),
            _metadata(pid, _THREAD_IDS["compute"], "thread_name", "compute"),
            _metadata(pid, _THREAD_IDS["comm"], "thread_name", "comm"),
        ]
        if chunk["host"]:
            events.append({"ph": "M", "name": "process_labels", "pid": pid,
                           "args": {"labels": chunk["host"]}})
        dropped[f"rank {rank}"] = int(chunk["dropped"])
        for name, category, location, detail, start, end, nbytes, lane in chunk["events"]:
            spans.append(_span(name, category, start, end, pid, _THREAD_IDS[lane], origin_ns,
                               _event_args(location, detail, nbytes)))
    # Per thread in time order; an enclosing span before the spans it holds.
    spans.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    return {
        "traceEvents": events + spans,
        "displayTimeUnit": "ms",
        "otherData": {
            "clock": "CLOCK_MONOTONIC; ts in us since the profile started",
            "client_host": collected["host"],
            "ranks": ranks,
            "rank_clock_offsets_ns": {str(c["rank"]): int(c["offset_ns"])
                                      for c in collected["ranks"] if c["supported"]},
            "dropped": dropped,
        },
    }


# --------------------------------------------------------------------------
# Reading a trace

def load(path):
    """The trace written by `profile` (a dict).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "t.json")
        >>> with profile(path):
        ...     pass
        >>> load(path)["otherData"]["clock"].split(";")[0]
        'CLOCK_MONOTONIC'
    """
    with open(os.fspath(path)) as f:
        return json.load(f)


def _names(trace):
    processes, threads = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "M":
            continue
        if e["name"] == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return processes, threads


def spans(trace, process=None, thread=None):
    """The complete ("X") events of `trace`, each with ``"process"`` and
    ``"thread"`` names added, optionally only those of one process
    (``"client"``, ``"controller"``, ``"rank 0"``, or a rank number) and
    thread (``"compute"``, ``"comm"``, ...), in time order.

    Example:
        >>> import dtorch
        >>> mesh = dtorch.init_device_mesh("cpu", (4,))
        >>> with profile() as prof:
        ...     _ = (dtorch.ones(8, device_mesh=mesh, placements=[dtorch.Shard(0)]) + 1).numpy()
        >>> [e["name"] for e in spans(prof.trace, 0, "compute") if e["cat"] == "kernel"]
        ['full', 'add']

        (From the segment's second run, ``full`` and ``add`` run as one
        generated kernel, named ``fused``: see the fusion section of
        docs/architecture.md.)
    """
    if isinstance(process, int):
        process = f"rank {process}"
    processes, threads = _names(trace)
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        p = processes.get(e["pid"])
        t = threads.get((e["pid"], e["tid"]))
        if (process is None or p == process) and (thread is None or t == thread):
            out.append(dict(e, process=p, thread=t))
    out.sort(key=lambda e: (e["ts"], -e["dur"]))
    return out


def overlaps(trace, rank, collective="all_reduce", compute=None, min_overlap_us=0.0):
    """Where rank `rank` communicates while it computes: every pair
    (collective span on its ``comm`` thread named `collective`, kernel span
    on its ``compute`` thread) whose times intersect by more than
    `min_overlap_us`, with the length of the intersection in microseconds.

    Args:
        trace (dict): a trace written by `profile` (see `load`).
        rank (int): the global rank.
        collective (str): the collective's op name.
        compute (callable or set of str, optional): which kernel spans
            count: a predicate on the span dict or a set of op names;
            default: every kernel.

    Returns:
        list[tuple[dict, dict, float]]: (collective span, kernel span,
        overlap in us), in the collective's time order.

    Example:
        >>> meta = [{"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "rank 0"}},
        ...         {"ph": "M", "name": "thread_name", "pid": 9, "tid": 1, "args": {"name": "compute"}},
        ...         {"ph": "M", "name": "thread_name", "pid": 9, "tid": 2, "args": {"name": "comm"}}]
        >>> x = lambda name, cat, tid, ts, dur: {"ph": "X", "name": name, "cat": cat, "pid": 9,
        ...                                      "tid": tid, "ts": ts, "dur": dur}
        >>> trace = {"traceEvents": meta + [x("matmul", "kernel", 1, 0, 10),
        ...                                 x("all_reduce", "collective", 2, 6, 8)]}
        >>> [(c["name"], k["name"], us) for c, k, us in overlaps(trace, 0)]
        [('all_reduce', 'matmul', 4)]
    """
    if compute is None:
        keep = lambda e: True  # noqa: E731
    elif callable(compute):
        keep = compute
    else:
        names = set(compute)
        keep = lambda e: e["name"] in names  # noqa: E731
    comm = [e for e in spans(trace, rank, "comm") if e["name"] == collective]
    kernels = [e for e in spans(trace, rank, "compute") if e["cat"] == "kernel" and keep(e)]
    found = []
    for c in comm:
        c_end = c["ts"] + c["dur"]
        for k in kernels:
            if k["ts"] >= c_end:
                break
            inter = min(c_end, k["ts"] + k["dur"]) - max(c["ts"], k["ts"])
            if inter > min_overlap_us:
                found.append((c, k, inter))
    return found


def check_streams(trace):
    """Checks that every thread's spans are in time order and either nested
    or disjoint (what one stream that runs one thing at a time gives).

    Returns:
        list[str]: one line per violation (empty when the trace is sound).

    Example:
        >>> meta = [{"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "rank 0"}}]
        >>> x = lambda ts, dur: {"ph": "X", "name": "k", "cat": "kernel", "pid": 9, "tid": 1,
        ...                      "ts": ts, "dur": dur}
        >>> check_streams({"traceEvents": meta + [x(0, 10), x(2, 3)]})
        []
        >>> len(check_streams({"traceEvents": meta + [x(0, 10), x(5, 10)]}))
        1
    """
    problems = []
    by_thread = {}
    for e in spans(trace):
        by_thread.setdefault((e["process"], e["thread"]), []).append(e)
    eps = 1e-3  # us: the file's resolution
    for (process, thread), events in by_thread.items():
        open_spans = []  # the spans that enclose the current one
        last_ts = None
        for e in events:
            if last_ts is not None and e["ts"] < last_ts:
                problems.append(f"{process}/{thread}: {e['name']} starts before the span before it")
            last_ts = e["ts"]
            end = e["ts"] + e["dur"]
            while open_spans and open_spans[-1] <= e["ts"] + eps:
                open_spans.pop()
            if open_spans and end > open_spans[-1] + eps:
                problems.append(f"{process}/{thread}: {e['name']} at {e['ts']:.3f} us overlaps "
                                f"a span it does not nest in")
            open_spans.append(end)
    return problems
