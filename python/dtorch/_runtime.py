"""Starting and stopping a DTorch session: the controller in this process
and its workers (started here, or started by hand and connected to)."""
import atexit
import datetime
import os
import shutil
from typing import NamedTuple

from . import _C

_state = {"started": False}


def _worker_executable():
    exe = os.environ.get("DTORCH_WORKER")
    if exe:
        return exe
    try:
        from . import _build_info
        candidate = os.path.join(_build_info.BUILD_DIR, "bin", "dtorch-worker")
        if os.path.exists(candidate):
            return candidate
    except ImportError:
        pass
    here = os.path.join(os.path.dirname(__file__), "bin", "dtorch-worker")
    if os.path.exists(here):
        return here
    return shutil.which("dtorch-worker") or ""


def _program_cache_dir(cache_dir):
    """The on-disk program cache folder: the argument, else
    ``$DTORCH_CACHE_DIR`` (empty: disabled), else ``~/.cache/dtorch``."""
    if cache_dir is None:
        cache_dir = os.environ.get("DTORCH_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(os.path.expanduser("~"), ".cache", "dtorch")
    if cache_dir in ("", False):
        return ""
    return os.path.join(os.fspath(cache_dir), "programs")


def _curve_keys(curve, workers, listen=""):
    """The controller's CURVE secret key and the workers' public keys, read
    from the files ``curve`` names (else ``$DTORCH_CURVE_SECRET_KEY_FILE``
    and ``$DTORCH_CURVE_WORKER_PUBLIC_KEY_FILES``); ``("", [])`` when CURVE
    is off."""
    if curve is None:
        secret_file = os.environ.get("DTORCH_CURVE_SECRET_KEY_FILE")
        if not secret_file or not (workers or listen):
            # The environment's keys are for workers started by hand; the
            # embedded cluster stays on loopback without them.
            return "", []
        files = [f for f in os.environ.get("DTORCH_CURVE_WORKER_PUBLIC_KEY_FILES", "").split(",") if f]
        curve = {"secret_key_file": secret_file, "worker_public_key_files": files}
    if not isinstance(curve, dict) or set(curve) - {"secret_key_file", "worker_public_key_files"}:
        raise ValueError("curve must be a dict with 'secret_key_file' and 'worker_public_key_files'")
    if not workers and not listen:
        raise ValueError("CURVE is for workers started by hand: give workers=[...] or listen=... "
                         "(the embedded cluster stays on loopback)")
    if not _C.curve_available():
        raise ValueError("the installed libzmq has no CURVE support (zmq_has('curve') is false)")
    secret_file = curve.get("secret_key_file")
    files = curve.get("worker_public_key_files") or []
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not secret_file or not files:
        raise ValueError("curve needs 'secret_key_file' (this controller's secret key) and "
                         "'worker_public_key_files' (one file, or one per worker)")
    if workers and len(files) not in (1, len(workers)):
        raise ValueError(f"curve: {len(files)} worker public key files for {len(workers)} workers "
                         "(give one for all, or one per worker)")
    secret = _C.read_curve_key_file(os.fspath(secret_file), "the controller's CURVE secret key")
    publics = [_C.read_curve_key_file(os.fspath(f), "a worker's CURVE public key") for f in files]
    return secret, publics


def generate_curve_keypair(prefix):
    """Writes a new CURVE key pair: ``PREFIX.key`` (the secret key, mode 0600)
    and ``PREFIX.pub`` (the public key), as ``dtorch-worker
    --generate-curve-keypair PREFIX`` does.

    Args:
        prefix (str): path of the two files without their suffix.

    Returns:
        str: the public key (40 Z85 characters).

    Raises:
        DTorchError: the files cannot be written, or libzmq lacks CURVE.

    Example:
        >>> import dtorch, os, tempfile
        >>> prefix = os.path.join(tempfile.mkdtemp(), "controller")
        >>> len(dtorch.generate_curve_keypair(prefix))
        40
        >>> oct(os.stat(prefix + ".key").st_mode & 0o777)
        '0o600'
    """
    return _C.write_curve_keypair(os.fspath(prefix))


_DEFAULT_HEARTBEAT_MS = 500
_DEFAULT_PEER_TIMEOUT_MS = 2500


def _listen_address(listen, workers):
    """The ZeroMQ endpoint ``init(listen=...)`` binds, or ``""``."""
    if not listen:
        return ""
    if not isinstance(listen, str):
        raise ValueError(f"listen must be a 'HOST:PORT' string, got {listen!r}")
    if workers:
        raise ValueError("give workers=[...] (the controller dials them) or listen=... "
                         "(the workers dial the controller), not both")
    address = listen[len("tcp://"):] if listen.startswith("tcp://") else listen
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or "/" in address:
        raise ValueError(f"listen must be 'HOST:PORT' (or ':PORT' for every interface), "
                         f"got {listen!r}")
    return f"tcp://{host or '0.0.0.0'}:{int(port)}"


def _milliseconds(name, value, env):
    """A duration in milliseconds from ``value`` (seconds, or a
    ``datetime.timedelta``), else from the environment variable ``env``
    (milliseconds); 0 when neither is given."""
    if value is None:
        text = os.environ.get(env, "")
        if not text:
            return 0
        try:
            ms = int(text)
        except ValueError:
            raise ValueError(f"${env} must be a whole number of milliseconds, got {text!r}") from None
        if ms <= 0:
            raise ValueError(f"${env} must be positive, got {ms}")
        return ms
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return max(1, int(round(value * 1000)))


def init(world_size=None, workers=None, backend=None, num_processes=None, token=None,
         cache_dir=None, curve=None, heartbeat_interval=None, peer_timeout=None,
         collective_timeout=None, auto_restart=None, listen=None, admission_timeout=None):
    """Starts a DTorch session.

    Without ``workers`` it starts the embedded cluster: a controller thread in
    this process and local ``dtorch-worker`` processes hosting ``world_size``
    ranks, with a fresh token. With ``workers`` it starts no process and
    connects to workers started by hand with
    ``dtorch-worker --listen ADDR --token T``; the world size is then the one
    they were started with. With ``listen`` it starts no process either: the
    controller listens on that address and the workers dial in to it
    (``dtorch-worker --controller HOST:PORT``, or ``--dial-in`` with
    torchrun's ``MASTER_ADDR``/``MASTER_PORT``); it returns once every rank
    of the world has arrived (docs/guide/multi-host.md, "Workers that dial
    in").

    Calling it is optional: the first mesh or tensor calls it with the
    defaults.

    Args:
        world_size (int, optional): ranks of the embedded cluster; else
            ``$DTORCH_WORLD_SIZE``, else 4. With ``listen``: the ranks the
            workers that dial in must make up (each must have been started
            for this world size); else ``$DTORCH_WORLD_SIZE``, else the
            first worker's world size.
        workers (list[str], optional): addresses such as
            ``"tcp://host:5555"``; else ``$DTORCH_WORKERS`` (comma separated).
        backend (str, optional): ``"cluster"`` (worker processes, the
            default; else ``$DTORCH_BACKEND``), ``"inprocess"`` (a thread per
            rank in this process, for tests) or ``"simulated"`` (workers that
            validate programs and answer at once without running anything:
            fetched values are zeros of the right shape and dtype; for
            measuring the controller at any world size).
        num_processes (int, optional): worker processes of the embedded
            cluster; else ``$DTORCH_NUM_PROCESSES``, else ``min(2, world_size)``
            (``"simulated"``: one process per 8 ranks).
        cache_dir (str, optional): where compiled programs are kept across
            runs (under ``programs/``, keyed by the compiler's version and
            the segment's structure); else ``$DTORCH_CACHE_DIR``, else
            ``~/.cache/dtorch``. ``""`` (or ``DTORCH_CACHE_DIR=""``) turns
            the on-disk cache off.
        token (str, optional): the workers' token when connecting to
            ``workers``; else ``$DTORCH_TOKEN``, else the content of the file
            ``$DTORCH_TOKEN_FILE``. It never appears in errors or logs.
        curve (dict, optional): CurveZMQ encryption and key authentication
            with ``workers``: ``{"secret_key_file": this controller's secret
            key, "worker_public_key_files": [one file, or one per worker]}``
            (key files as written by `generate_curve_keypair`); else
            ``$DTORCH_CURVE_SECRET_KEY_FILE`` and
            ``$DTORCH_CURVE_WORKER_PUBLIC_KEY_FILES`` (comma separated).
            The workers are started with ``--curve-secret-key-file`` and
            ``--curve-controller-public-key-file``; the token check still
            applies. See docs/guide/security.md.
        heartbeat_interval (float, optional): seconds between the
            heartbeats the controller and each worker send each other (from
            their I/O threads, so a long kernel does not delay them); else
            ``$DTORCH_HEARTBEAT_MS`` (milliseconds), else 0.5.
        peer_timeout (float, optional): a worker from which the controller
            heard nothing for this many seconds is declared unresponsive
            (a stopped or hung process): every run that needs its ranks
            fails with `WorkerError` naming its rank and host, and an
            embedded worker is killed. Else ``$DTORCH_PEER_TIMEOUT_MS``,
            else 2.5. Must exceed ``heartbeat_interval``. Embedded workers
            exit when the controller is silent this long (at most 3 s).
        collective_timeout (float, optional): deadline, in seconds, of every
            collective on the workers started here; a collective that waits
            longer for a live peer raises `CollectiveTimeout` naming the
            instruction and the ranks that did not arrive. Else
            ``$DTORCH_COLLECTIVE_TIMEOUT_MS``, else 30. A dead or
            unresponsive worker is reported sooner, whatever this deadline
            (see docs/guide/faults.md).
        listen (str, optional): ``"HOST:PORT"`` (``":PORT"`` for every
            interface, or ``"tcp://HOST:PORT"``) on which the controller
            waits for workers that dial in; else ``$DTORCH_LISTEN``. Needs
            the workers' token. A worker that reports a wrong token or
            protocol version, a different world size, ranks outside the
            world or a rank another worker holds fails the start at once
            with a `WorkerError` naming it (the worker is told why and
            exits); so do the workers already admitted.
        admission_timeout (float, optional): seconds ``init(listen=...)``
            waits for every rank to dial in, then raises `WorkerError`
            naming the ranks that never arrived; else
            ``$DTORCH_ADMISSION_TIMEOUT_MS``, else 60.
        auto_restart (bool, optional): the embedded cluster replaces a
            worker process that died by itself, as `restart` does, before
            the controller's next request (the failure is still raised
            once, by a `WorkerError` or the `LostTensorError` of a tensor
            it cost); else ``$DTORCH_AUTO_RESTART=1``; off by default.
            Not with ``workers`` (they cannot be replaced).

    Raises:
        RuntimeError: a session is already running (call `shutdown` first).
        ValueError: ``world_size`` is not a positive int, ``workers`` are
            given without a token, or with ``auto_restart``, or ``curve`` is malformed or given
            without ``workers``, or a timeout is not positive (or
            ``peer_timeout`` does not exceed ``heartbeat_interval``).
        WorkerError: the workers could not be started or reached, or refused
            the token.

    Example:
        >>> import dtorch
        >>> dtorch.shutdown()
        >>> dtorch.init(world_size=2)
        >>> dtorch.init_device_mesh("cpu", (2,)).size()
        2
        >>> dtorch.shutdown()
    """
    if _C.is_initialized():
        raise RuntimeError("dtorch is already initialized; call dtorch.shutdown() first")
    if listen is None:
        listen = os.environ.get("DTORCH_LISTEN") or None
    if workers is None and os.environ.get("DTORCH_WORKERS") and not listen:
        workers = [w for w in os.environ["DTORCH_WORKERS"].split(",") if w]
    workers = list(workers or [])
    listen = _listen_address(listen, workers)
    if world_size is None:
        world_size = int(os.environ.get("DTORCH_WORLD_SIZE", "0" if listen else "4"))
    if not isinstance(world_size, int) or world_size < (0 if listen else 1):
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    backend = backend or os.environ.get("DTORCH_BACKEND", "cluster")
    if num_processes is None:
        num_processes = int(os.environ.get("DTORCH_NUM_PROCESSES", "0")) or (
            (world_size + 7) // 8 if backend == "simulated" else max(1, min(2, world_size)))
    if listen and backend != "cluster":
        raise ValueError(f"listen=... needs the cluster backend, not {backend!r}")
    if (workers or listen) and token is None:
        token = os.environ.get("DTORCH_TOKEN")
        if not token and os.environ.get("DTORCH_TOKEN_FILE"):
            with open(os.environ["DTORCH_TOKEN_FILE"]) as f:
                token = f.read().strip()
        if not token:
            raise ValueError("workers started by hand need their token: init(token=...), "
                             "$DTORCH_TOKEN or $DTORCH_TOKEN_FILE")
    heartbeat_ms = _milliseconds("heartbeat_interval", heartbeat_interval, "DTORCH_HEARTBEAT_MS")
    peer_timeout_ms = _milliseconds("peer_timeout", peer_timeout, "DTORCH_PEER_TIMEOUT_MS")
    collective_ms = _milliseconds("collective_timeout", collective_timeout,
                                  "DTORCH_COLLECTIVE_TIMEOUT_MS")
    if (peer_timeout_ms or _DEFAULT_PEER_TIMEOUT_MS) <= (heartbeat_ms or _DEFAULT_HEARTBEAT_MS):
        raise ValueError("peer_timeout must exceed heartbeat_interval "
                         f"({(peer_timeout_ms or _DEFAULT_PEER_TIMEOUT_MS) / 1000} s <= "
                         f"{(heartbeat_ms or _DEFAULT_HEARTBEAT_MS) / 1000} s)")
    if auto_restart is None:
        auto_restart = os.environ.get("DTORCH_AUTO_RESTART", "0") not in ("", "0")
    if auto_restart and (workers or listen):
        raise ValueError("auto_restart needs the embedded cluster: workers started by hand "
                         "cannot be replaced")
    admission_ms = _milliseconds("admission_timeout", admission_timeout,
                                 "DTORCH_ADMISSION_TIMEOUT_MS")
    curve_secret, curve_publics = _curve_keys(curve, workers, listen)
    _C.init(world_size, num_processes, backend, _worker_executable(), workers, token or "",
            _program_cache_dir(cache_dir), curve_secret, curve_publics, heartbeat_ms=heartbeat_ms,
            peer_timeout_ms=peer_timeout_ms, collective_timeout_ms=collective_ms,
            auto_restart=bool(auto_restart), listen=listen,
            admission_timeout_ms=admission_ms)
    _state["started"] = True


def ensure_initialized():
    """Starts the default session (`init` with no arguments) unless one is
    running.

    Example:
        >>> import dtorch
        >>> ensure_initialized()
        >>> dtorch.is_initialized()
        True
    """
    if not _C.is_initialized():
        init()


def shutdown():
    """Ends the session: stops the controller and the workers that `init`
    started (workers started by hand exit too: they serve one controller).

    Safe to call twice, and called at interpreter exit. Meshes and tensors of
    the ended session must not be used afterwards; the next mesh or tensor
    starts a new session.

    Example:
        >>> import dtorch
        >>> dtorch.init_device_mesh("cpu", (2,)).size()
        2
        >>> dtorch.shutdown()
        >>> dtorch.is_initialized()
        False
    """
    from . import device_mesh
    device_mesh._reset()
    _C.shutdown()
    _state["started"] = False


class RestartInfo(NamedTuple):
    """What `restart` did.

    Attributes:
        replaced_ranks (tuple[int, ...]): the global ranks whose worker
            process was replaced (it had died, or was stuck); their tensors
            are lost.
        lost_tensors (int): tensors on the workers that had a piece on one
            of those ranks.
        seconds (float): how long the restart took.

    Example:
        >>> from dtorch import RestartInfo
        >>> info = RestartInfo(replaced_ranks=(2, 3), lost_tensors=5, seconds=0.05)
        >>> info.replaced_ranks, info.lost_tensors
        ((2, 3), 5)
    """
    replaced_ranks: tuple
    lost_tensors: int
    seconds: float


def restart(idle_timeout=2.0):
    """Recovers the session after a `WorkerError`: replaces the lost worker
    processes and makes every rank usable again, without a new session.

    Every surviving worker first finishes the work sent before, then drops
    its communicators and builds new ones with a new rendezvous generation
    (so nothing of the failed world is ever matched again); it keeps its
    tensors and compiled programs. A survivor that does not become idle
    within ``idle_timeout`` seconds (stuck in a collective or a kernel) is
    killed and replaced too. Each dead worker process of the embedded
    cluster is replaced by a fresh one hosting the same ranks. Errors of the
    work submitted before are dropped.

    Afterwards every tensor with a piece on a replaced rank is lost: an op
    on it, or fetching it, raises `LostTensorError` (a `WorkerError`) naming
    the rank. Tensors entirely on surviving ranks keep their values. New
    tensors, collectives and compiled programs work on all ranks (programs
    are uploaded again on their next use). The random seed state
    (`manual_seed`) and everything held in Python (optimizer step counts)
    are unchanged; give lost parameters a value again, e.g. with
    ``load_state_dict``.

    Workers started by hand (``init(workers=...)``) cannot be replaced by
    the controller: when one of them is gone, `restart` raises a
    `WorkerError` naming it and its address; start it again and begin a new
    session (`shutdown`, `init`). When none is gone it resets them as
    above.

    Args:
        idle_timeout (float): seconds a survivor may take to finish its
            current work before it is replaced (default 2).

    Returns:
        RestartInfo: the replaced ranks, the number of lost tensors and the
        time taken.

    Raises:
        DTorchError: dtorch is not initialized.
        WorkerError: a worker started by hand is gone, or a replacement
            process could not be started.

    Example:
        >>> import dtorch
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> dtorch.restart().replaced_ranks  # nothing had failed
        ()
        >>> dtorch.ones(4, device_mesh=mesh).sum().item()
        4.0
    """
    if not _C.is_initialized():
        from .errors import DTorchError
        raise DTorchError("dtorch is not initialized: nothing to restart")
    replaced, lost, seconds = _C.restart(float(idle_timeout))
    return RestartInfo(tuple(replaced), int(lost), float(seconds))


atexit.register(shutdown)
