"""dtorch.distributed.checkpoint: torch's distributed checkpoint (DCP) API.

``save`` has every rank write its own pieces of the state's DTensors (in
parallel, from the workers: the client never holds the model) plus one
metadata file; ``load`` reads a checkpoint into a state dict in place,
resharded to the mesh and placements the state's tensors have now, each
rank reading only the region of its new piece. A save is atomic. The format
and the guarantees are in docs/guide/checkpoints.md.
"""
import json
import os
import shutil
from collections.abc import Mapping

import numpy as np

from ... import _C
from ._state import RUNTIME_DTYPES, TensorRef, decode, flatten

Tensor = _C.Tensor

__all__ = ["save", "load", "read_metadata", "METADATA_FILE"]

METADATA_FILE = "metadata.json"
_ARRAY_FILE = "client-arrays.bin"

# For tests: {"after_shards": fn, "after_metadata": fn}, called with the
# staging folder at those points of a save (to kill a process there).
_test_hooks = {}


def _np_dtype(dt):
    from ..._creation import _np_dtype as np_dtype
    return np_dtype(dt)


def _staging_prefix(target):
    return os.path.join(os.path.dirname(target), "." + os.path.basename(target) + ".tmp-")


def _remove_stale_staging(target):
    """Staging folders of saves whose process is gone (killed mid-save)."""
    prefix = _staging_prefix(target)
    parent = os.path.dirname(target)
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not path.startswith(prefix):
            continue
        pid = path[len(prefix):].split("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # that save may still be running
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            continue


def _write_arrays(arrays, folder):
    """The client's own numpy arrays: one file, one chunk per array."""
    entries = []
    blob = bytearray()
    for key, a in arrays.items():
        data = a.tobytes()
        chunks = []
        if a.size:
            chunks.append({"offsets": [0] * a.ndim, "sizes": list(a.shape), "file": _ARRAY_FILE,
                           "byte_offset": len(blob), "byte_size": len(data),
                           "checksum": _C.checkpoint_checksum(data)})
        entries.append({"key": key, "dtype": RUNTIME_DTYPES[a.dtype.name],
                        "shape": list(a.shape), "chunks": chunks})
        blob += data
    if arrays:
        _C.checkpoint_write_file(os.path.join(folder, _ARRAY_FILE), bytes(blob))
    return entries


def save(state_dict, *, checkpoint_id, storage_writer=None, planner=None,
         process_group=None, no_dist=False):
    """Saves a state dict into the folder `checkpoint_id`, atomically.

    Every rank writes the pieces of the DTensors it is the lowest rank to
    hold (a replicated piece once; Partial tensors are reduced first) into
    its own file, synced to disk; the client writes its numpy arrays and
    the metadata file (shapes, dtypes, chunks, checksums and the non-tensor
    values) last, into a staging folder next to `checkpoint_id`, which then
    replaces `checkpoint_id` in one atomic exchange. A process killed at
    any point leaves the previous checkpoint (or the new one) complete.

    Args:
        state_dict (dict): nested dicts, lists and tuples of DTensors, numpy
            arrays, torch tensors, Python numbers, strings and None (e.g.
            ``{"model": model.state_dict(), "optim": opt.state_dict(),
            "step": 10, "rng": dtorch.get_rng_state()}``).
        checkpoint_id (str or os.PathLike): the checkpoint folder.
        storage_writer, planner, process_group, no_dist: accepted for
            torch's signature; dtorch's single controller needs none.

    Raises:
        TypeError: a value of a type that cannot be saved (named by key).
        dtorch.WorkerError: a worker died during the save (the previous
            checkpoint stays).
        dtorch.DTorchError: a write failed (the rank and the reason).

    Example:
        >>> import tempfile, os, numpy as np
        >>> import dtorch, dtorch.distributed.checkpoint as dcp
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> w = dtorch.distribute_tensor(np.arange(6.0).reshape(3, 2), mesh, [Shard(0)])
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> dcp.save({"w": w, "step": 3}, checkpoint_id=path)
        >>> sorted(os.listdir(path))
        ['metadata.json', 'shards-rank-00000.bin', 'shards-rank-00001.bin']
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"dcp.save expects a dict, got {type(state_dict).__name__}")
    target = os.path.abspath(os.fspath(checkpoint_id))
    tensors, arrays = {}, {}
    structure = flatten(state_dict, tensors, arrays)
    objects_json = json.dumps(structure, allow_nan=False)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    _remove_stale_staging(target)
    staging = _staging_prefix(target) + f"{os.getpid()}-{os.urandom(4).hex()}"
    os.mkdir(staging)
    try:
        entries = []
        if tensors:
            entries += _C.checkpoint_save_shards(list(tensors.values()), list(tensors),
                                                 staging)
        entries += _write_arrays(arrays, staging)
        if "after_shards" in _test_hooks:
            _test_hooks["after_shards"](staging)
        _C.checkpoint_write_metadata(os.path.join(staging, METADATA_FILE), entries,
                                     objects_json)
        if "after_metadata" in _test_hooks:
            _test_hooks["after_metadata"](staging)
        old = _C.checkpoint_commit(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old:
        shutil.rmtree(old, ignore_errors=True)


def read_metadata(checkpoint_id):
    """The validated metadata of a checkpoint: ``(entries, structure)``,
    the tensor entries by key (dtype, shape, chunks) and the saved state's
    structure with `TensorRef` leaves. Raises FileNotFoundError when there
    is no complete checkpoint there, DTorchError or ValueError when its
    metadata is corrupt.

    Example:
        >>> import tempfile, os, numpy as np
        >>> import dtorch.distributed.checkpoint as dcp
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> dcp.save({"a": np.zeros((2, 3), np.float32), "lr": 0.1}, checkpoint_id=path)
        >>> entries, structure = dcp.read_metadata(path)
        >>> entries["a"]["shape"], structure["lr"]
        ([2, 3], 0.1)
    """
    folder = os.path.abspath(os.fspath(checkpoint_id))
    path = os.path.join(folder, METADATA_FILE)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no checkpoint at {folder}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {folder} has no {METADATA_FILE}: it is "
                                "incomplete or not a dtorch checkpoint")
    with open(path, "rb") as f:
        entries, objects_json = _C.checkpoint_read_metadata(f.read())
    by_key = {e["key"]: e for e in entries}
    try:
        objects = json.loads(objects_json)
    except ValueError as e:
        raise ValueError(f"checkpoint metadata is not valid: objects_json: {e}") from None
    structure = decode(objects, "", frozenset(by_key))
    if not isinstance(structure, dict):
        raise ValueError("checkpoint metadata is not valid: the state is not a dict")
    return by_key, structure


def _read_full(entry, folder):
    """The whole tensor of `entry`, read by the client (numpy targets)."""
    out = np.empty(entry["shape"], dtype=_np_dtype(entry["dtype"]))
    for chunk in entry["chunks"]:
        path = os.path.join(folder, chunk["file"])
        with open(path, "rb") as f:
            f.seek(chunk["byte_offset"])
            data = f.read(chunk["byte_size"])
        if len(data) != chunk["byte_size"]:
            raise _C_error(f"checkpoint file {chunk['file']} is truncated")
        if _C.checkpoint_checksum(data) != chunk["checksum"]:
            raise _C_error(f"checkpoint file {chunk['file']} is corrupt: checksum mismatch "
                           f"at byte {chunk['byte_offset']}")
        piece = np.frombuffer(data, dtype=out.dtype).reshape(chunk["sizes"])
        index = tuple(slice(o, o + s) for o, s in zip(chunk["offsets"], chunk["sizes"]))
        out[index] = piece
    return out


def _C_error(message):
    from ...errors import DTorchError
    return DTorchError(message)


class _Plan:
    """What a load will do, decided (and checked) before anything changes."""

    def __init__(self, entries, folder):
        self.entries = entries
        self.folder = folder
        self.dtensor_loads = []   # (target Tensor, entry)
        self.sets = []            # (container, key, value thunk)

    def value(self, saved):
        """A saved node as a new Python value (tensors read by the client)."""
        if isinstance(saved, TensorRef):
            entry = self.entries[saved.key]
            return lambda: _read_full(entry, self.folder)
        if isinstance(saved, dict):
            parts = {k: self.value(v) for k, v in saved.items()}
            return lambda: {k: f() for k, f in parts.items()}
        if isinstance(saved, (list, tuple)):
            parts = [self.value(v) for v in saved]
            kind = type(saved)
            return lambda: kind(f() for f in parts)
        return lambda: saved

    def merge(self, target, saved, where):
        """Plans loading `saved` into the mutable container `target`."""
        keys = range(len(saved)) if isinstance(saved, list) else saved.keys()
        for k in keys:
            here = f"{where}.{k}" if where else str(k)
            s = saved[k]
            has = k in target if isinstance(target, Mapping) else k < len(target)
            t = target[k] if has else None
            if isinstance(t, Tensor):
                if not isinstance(s, TensorRef):
                    raise ValueError(f"checkpoint has no tensor for '{here}'")
                entry = self.entries[s.key]
                shape = tuple(entry["shape"])
                if shape != tuple(t.shape):
                    raise ValueError(f"checkpoint tensor '{here}' has shape {shape}, "
                                     f"the target has {tuple(t.shape)}")
                if entry["dtype"] != t.dtype:
                    raise ValueError(f"checkpoint tensor '{here}' has dtype "
                                     f"{entry['dtype'].name}, the target has {t.dtype.name}")
                self.dtensor_loads.append((t, entry))
            elif isinstance(s, TensorRef) and isinstance(t, np.ndarray):
                entry = self.entries[s.key]
                if tuple(entry["shape"]) != t.shape:
                    raise ValueError(f"checkpoint tensor '{here}' has shape "
                                     f"{tuple(entry['shape'])}, the target has {t.shape}")
                self.sets.append((target, k, self.value(s)))
            elif isinstance(s, dict) and isinstance(t, Mapping):
                self.merge(t, s, here)
            elif isinstance(s, list) and isinstance(t, list) and len(s) == len(t):
                self.merge(t, s, here)
            else:
                self.sets.append((target, k, self.value(s)))

    def check_covered(self, target, saved, where):
        """Every tensor of the target must be in the checkpoint."""
        items = target.items() if isinstance(target, Mapping) else (
            enumerate(target) if isinstance(target, list) else ())
        for k, t in items:
            here = f"{where}.{k}" if where else str(k)
            has = (k in saved) if isinstance(saved, dict) else (
                isinstance(saved, list) and k < len(saved))
            if isinstance(t, Tensor) and not has:
                raise ValueError(f"checkpoint has no tensor for '{here}'")
            if has and isinstance(t, (Mapping, list)):
                self.check_covered(t, saved[k], here)


def load(state_dict, *, checkpoint_id, storage_reader=None, planner=None,
         process_group=None, no_dist=False):
    """Loads a checkpoint into `state_dict` in place, resharded.

    Each DTensor of `state_dict` keeps its mesh and placements and gets the
    saved value: every rank of its mesh reads, from the saved chunks that
    overlap it, exactly the region of the global tensor its piece covers
    (any saved layout, any target layout; the client moves no data). Numpy
    arrays, numbers, strings and containers of the state are replaced by
    the saved values; keys the checkpoint has and the state lacks are added
    (their tensors as numpy arrays, read by the client: e.g. the state of
    an optimizer that has not stepped yet, which
    ``optimizer.load_state_dict`` then places like its parameters).
    Everything is checked before anything changes.

    Args:
        state_dict (dict): the state to load into (e.g. the dict given to
            `save`, made again from the current model and optimizer).
        checkpoint_id (str or os.PathLike): the checkpoint folder.
        storage_reader, planner, process_group, no_dist: accepted for
            torch's signature.

    Raises:
        FileNotFoundError: no complete checkpoint at `checkpoint_id`.
        ValueError: a tensor of `state_dict` is missing from the checkpoint,
            or its shape or dtype differs (the message names the key); or
            the metadata's structure is invalid.
        dtorch.DTorchError: corrupt or missing data files or metadata.

    Example:
        >>> import tempfile, os, numpy as np
        >>> import dtorch, dtorch.distributed.checkpoint as dcp
        >>> from dtorch import Shard, Replicate
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> a = np.arange(6, dtype=np.float32).reshape(3, 2)
        >>> w = dtorch.distribute_tensor(a, mesh, [Shard(0)])
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> dcp.save({"w": w, "step": 3}, checkpoint_id=path)
        >>> state = {"w": dtorch.zeros(3, 2, device_mesh=mesh, placements=[Shard(1)]),
        ...          "step": 0}
        >>> dcp.load(state, checkpoint_id=path)
        >>> state["step"], state["w"].placements, state["w"].numpy()[2].tolist()
        (3, (Shard(dim=1),), [4.0, 5.0])
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"dcp.load expects a dict, got {type(state_dict).__name__}")
    folder = os.path.abspath(os.fspath(checkpoint_id))
    entries, saved = read_metadata(folder)
    plan = _Plan(entries, folder)
    plan.check_covered(state_dict, saved, "")
    plan.merge(state_dict, saved, "")
    if plan.dtensor_loads:
        targets = [t for t, _ in plan.dtensor_loads]
        loaded = _C.checkpoint_load_shards([e for _, e in plan.dtensor_loads], targets, folder)
        for t, value in zip(targets, loaded):
            _C.assign(t, value)
    values = [(container, k, make()) for container, k, make in plan.sets]
    for container, k, v in values:
        if isinstance(container, list) and k >= len(container):
            container.append(v)
        else:
            container[k] = v
