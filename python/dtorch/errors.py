"""DTorch's exception classes.

Mistakes in a call (shapes, placements, dims) raise Python's own ValueError,
TypeError or IndexError at the call. The classes here report failures that
happen on the workers; because work runs in the background, they surface at
the next call that waits for a result of the failed work.
"""
import re


class DTorchError(RuntimeError):
    """Base class of every error DTorch raises on its own behalf.

    Example:
        >>> import dtorch
        >>> issubclass(dtorch.OutOfMemoryError, dtorch.DTorchError)
        True
    """


class WorkerError(DTorchError):
    """A worker died, stopped answering, refused the connection or failed.

    The tensors of the failed run are lost; the error is reported once. After
    a worker died, start a new session (`dtorch.shutdown`, `dtorch.init`).

    Args:
        message (str): what happened, starting with ``rank R (host H):``.
        rank (int): the global rank that failed, -1 if unknown.
        host (str): the host of that rank's worker, "" if unknown.

    Attributes:
        rank (int): the failed rank.
        host (str): its host.

    Example:
        >>> import dtorch
        >>> try:
        ...     raise dtorch.WorkerError("rank 2 (host a): worker died", rank=2, host="a")
        ... except dtorch.DTorchError as e:
        ...     print(e.rank, e.host, e)
        2 a rank 2 (host a): worker died
    """

    def __init__(self, message, rank=-1, host=""):
        super().__init__(message)
        self.rank = rank
        self.host = host


class CollectiveTimeout(WorkerError):
    """A collective did not complete before its deadline: a peer never joined
    (it is stuck, dead, or unreachable; across hosts check the workers'
    ``--gloo-host``).

    Example:
        >>> import dtorch
        >>> issubclass(dtorch.CollectiveTimeout, dtorch.WorkerError)
        True
    """


class OutOfMemoryError(WorkerError):
    """A worker could not allocate a buffer. Shard more, or use smaller
    tensors, so that each rank holds less.

    Example:
        >>> import dtorch
        >>> issubclass(dtorch.OutOfMemoryError, dtorch.WorkerError)
        True
    """


# How the controller describes a worker it lost (runtime/distributed/
# Cluster.cpp): such an error is a WorkerError even when a survivor's
# collective reported it (its message then quotes the survivor's).
_LOST_WORKER = re.compile(r"worker pid \d+ \(ranks \d+-\d+\) (killed by signal|exited with status|"
                          r"is unresponsive|vanished|ended|could not be started)")


def worker_error_class(message):
    """The most specific error class for a worker's error message.

    Example:
        >>> worker_error_class("rank 1 (host a): out of memory").__name__
        'OutOfMemoryError'
        >>> worker_error_class("rank 0 (host a): waiting for rank(s) 3").__name__
        'CollectiveTimeout'
        >>> worker_error_class("rank 2 (host a): worker pid 7 (ranks 2-3) killed by signal 9 "
        ...                    "(seen by rank 0: timed out)").__name__
        'WorkerError'
    """
    if _LOST_WORKER.search(message):
        return WorkerError
    if "out of memory" in message:
        return OutOfMemoryError
    if "waiting for rank(s)" in message or "timed out" in message:
        return CollectiveTimeout
    return WorkerError
