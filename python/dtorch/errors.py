"""DTorch's exception classes (see API.md, "Errors")."""


class DTorchError(RuntimeError):
    """Base class of every error DTorch raises on its own behalf."""


class WorkerError(DTorchError):
    """A worker died, stopped answering or failed; names the rank and host."""

    def __init__(self, message, rank=-1, host=""):
        super().__init__(message)
        self.rank = rank
        self.host = host


class CollectiveTimeout(DTorchError):
    """A collective did not complete before its deadline."""


class OutOfMemoryError(DTorchError):
    """A worker could not allocate a buffer."""
