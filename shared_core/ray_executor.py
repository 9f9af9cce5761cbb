"""A Ray cluster as a ``concurrent.futures.Executor`` for sharded builds (the ``ray`` extra).

Dask's client has ``get_executor()``; Ray has no executor of its own, so this is
the one the index's ``add(..., executor=)`` needs: each ``submit`` runs the
function as a Ray task and returns the task's future.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("RayExecutor needs ray: pip install 'conceptgraph[ray]'") from exc
    return ray


class RayExecutor(Executor):
    """Tasks on the Ray cluster at ``address`` (``None``: a local one started here, or the
    one this process already joined). ``init_options`` go to ``ray.init``; a cluster
    this executor started is shut down with it."""

    def __init__(self, address: str | None = None, **init_options: Any) -> None:
        ray = _ray()
        self._started = not ray.is_initialized()
        if self._started:
            ray.init(address=address, **init_options)
        self._remote: dict[Callable[..., Any], Any] = {}
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            remote = self._remote.get(fn)
            if remote is None:
                remote = self._remote[fn] = _ray().remote(fn)
        future: Future[Any] = remote.remote(*args, **kwargs).future()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
