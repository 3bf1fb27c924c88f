"""DTorch's exception classes (see API.md, "Errors")."""


class DTorchError(RuntimeError):
    """Base class of every error DTorch raises on its own behalf."""


class WorkerError(DTorchError):
    """A worker died, stopped answering or failed; names the rank and host."""

    def __init__(self, message, rank=-1, host=""):
        super().__init__(message)
        self.rank = rank
        self.host = host


class CollectiveTimeout(WorkerError):
    """A collective did not complete before its deadline (a peer never came)."""


class OutOfMemoryError(WorkerError):
    """A worker could not allocate a buffer."""


def worker_error_class(message):
    """The most specific class for a worker's error message."""
    if "out of memory" in message:
        return OutOfMemoryError
    if "waiting for rank(s)" in message or "timed out" in message:
        return CollectiveTimeout
    return WorkerError
