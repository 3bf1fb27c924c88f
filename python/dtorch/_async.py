"""Fetches that do not wait: ``Tensor.numpy_async()``, ``item_async()`` and
``await tensor``.

A fetch in flight is a ``dtorch._C.PendingFetch``: the request is queued
behind the work submitted before it (the pending segment is cut if it makes
the value, as ``numpy()`` does) and the call returns at once, so the client
goes on recording the next segment while the controller compiles and the
workers run. One daemon thread per process waits for the fetches in the order
they were issued (the workers answer them in that order anyway), with the GIL
released while it waits, and completes each ``concurrent.futures.Future``:
with the value, or with the fetch's error (a ``WorkerError``), after which
the session stays usable.
"""
import asyncio
import concurrent.futures
import queue
import threading

from . import _C


class _FetchWaiter:
    """The thread that completes the futures of fetches in flight."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._lock = threading.Lock()

    def submit(self, pending, convert):
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # issued: it can no longer be cancelled
        self._ensure_thread()
        self._queue.put((pending, convert, future))
        return future

    def _ensure_thread(self):
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dtorch-fetch-waiter",
                                                daemon=True)
                self._thread.start()

    def _run(self):
        while True:
            pending, convert, future = self._queue.get()
            try:
                value = pending.wait()  # releases the GIL while it waits
                if convert is not None:
                    value = convert(value)
            except BaseException as e:  # noqa: BLE001 - every error belongs to the future
                future.set_exception(e)
            else:
                future.set_result(value)
            del pending, convert, future


_waiter = _FetchWaiter()


def numpy_async(x):
    """The full value of `x` as a numpy array, in a
    ``concurrent.futures.Future``; returns at once.

    Example:
        >>> import dtorch
        >>> x = dtorch.ones(4, device_mesh=dtorch.init_device_mesh("cpu", (2,)))
        >>> fut = (x * 3).numpy_async()   # the client goes on recording
        >>> fut.result().tolist()
        [3.0, 3.0, 3.0, 3.0]
    """
    return _waiter.submit(_C.fetch_async(x), None)


def _scalar(value):
    return value.reshape(()).item()


def item_async(x):
    """``x.item()`` in a ``concurrent.futures.Future``; returns at once.

    Raises:
        ValueError: `x` has more than one element (at the call).

    Example:
        >>> import dtorch
        >>> x = dtorch.arange(6, device_mesh=dtorch.init_device_mesh("cpu", (2,)))
        >>> x.sum().item_async().result()
        15
    """
    numel = 1
    for s in x.shape:
        numel *= s
    if numel != 1:
        raise ValueError(f"item() needs a tensor with one element, this one has shape {x.shape}")
    return _waiter.submit(_C.fetch_async(x), _scalar)


def tensor_await(x):
    """``await x`` in asyncio: the value as a numpy array (``Tensor.__await__``).

    Example:
        >>> import asyncio
        >>> import dtorch
        >>> x = dtorch.arange(4, device_mesh=dtorch.init_device_mesh("cpu", (2,)))
        >>> async def doubled():
        ...     return await (x * 2)
        >>> asyncio.run(doubled()).tolist()
        [0, 2, 4, 6]
    """
    return asyncio.wrap_future(numpy_async(x)).__await__()
