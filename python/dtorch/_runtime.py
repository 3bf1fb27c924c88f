"""Starting and stopping the embedded cluster (controller + local workers)."""
import atexit
import os
import shutil

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


def init(world_size=None, workers=None, backend=None, num_processes=None, token=None):
    """Starts the embedded default: a controller in this process and local
    dtorch-worker processes hosting `world_size` ranks (else
    $DTORCH_WORLD_SIZE, else 4) with a fresh token, or connects to `workers`
    (else $DTORCH_WORKERS, comma separated) started with
    `dtorch-worker --listen ADDR --token T` (token: else $DTORCH_TOKEN)."""
    if _C.is_initialized():
        raise RuntimeError("dtorch is already initialized; call dtorch.shutdown() first")
    if workers is None and os.environ.get("DTORCH_WORKERS"):
        workers = [w for w in os.environ["DTORCH_WORKERS"].split(",") if w]
    workers = list(workers or [])
    if world_size is None:
        world_size = int(os.environ.get("DTORCH_WORLD_SIZE", "4"))
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    backend = backend or os.environ.get("DTORCH_BACKEND", "cluster")
    if num_processes is None:
        num_processes = int(os.environ.get("DTORCH_NUM_PROCESSES", "0")) or min(2, world_size)
    if workers and token is None:
        token = os.environ.get("DTORCH_TOKEN")
        if not token:
            raise ValueError("connecting to workers needs their token: init(token=...) or $DTORCH_TOKEN")
    _C.init(world_size, num_processes, backend, _worker_executable(), workers, token or "")
    _state["started"] = True


def ensure_initialized():
    if not _C.is_initialized():
        init()


def shutdown():
    """Stops what init() started; safe to call twice. Also runs at exit."""
    from . import device_mesh
    device_mesh._reset()
    _C.shutdown()
    _state["started"] = False


atexit.register(shutdown)
