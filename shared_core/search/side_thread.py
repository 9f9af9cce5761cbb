"""A query's part that needs nothing else the query does, run on a second thread.

On the candidate path, the units' vector search (an HNSW search and the exact rescoring
of the units it finds, then the cosines of the even sample that ranks beyond those are
estimated from) needs only the query vector, and the concept search, the BM25,
evidence and walk views need only the query. faiss, and numpy's gathers and products,
release the GIL, so on a small machine's second core the first can run beside the rest:
the scale corpus's queries took 28.9-29.5 ms p50 against 34.3-36.8 ms at a million
passages, and 17.9-19.2 ms against 24.1-25.8 ms at 80,000, with the same answers
(``benchmarks/results/NOTES.md``, fiftieth round). Scoring the rank sample there too
took the million-passage queries to 27.2-29.1 ms, against 29.9-30.3 (fifty-first
round). A BM25 view whose terms' postings hold at least 100,000 entries is made there
next: 26.2-26.5 ms against 28.1-29.1 at a million passages, where a query's terms read
226,000 entries (median), and a tie at 80,000 (fifty-second round). That view's best list
is found there too, and once the pool of candidates is known, the worker ranks it by
similarity while the caller ranks it in the other views: 22.2-24.9 ms against 24.5-25.6
at a million passages, 15.9-16.3 against 16.7-17.5 at 80,000 (fifty-third round).
Moving the concept search there gained nothing: at 80,000 passages the caller then
waited for it.

Two rules make it pay, and keep it safe:

- **OpenBLAS on one thread while such a query runs** (:func:`blas_on_one_thread`).
  Every product over more than a few dozen rows wakes OpenBLAS's helper thread, which
  then takes the core the second thread needs: with it, overlapping gained nothing at
  all. The limit is the process's (OpenBLAS on pthreads keeps one count), held from the
  first such query in to the last one out, so a build on another thread meanwhile
  multiplies on one thread too. Other BLAS libraries (MKL, OpenMP builds) keep their
  counts; they were not measured.
- **One worker thread per process, used only when free** (:func:`run_beside`). A query
  that finds it busy with another query's part runs its part itself, so concurrent
  queries never wait for each other's parts. A forked child starts its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """A part started by :func:`run_beside`: :meth:`result` waits for it and returns
    its value, or raises what it raised."""

    def __init__(self, future: Future[T]) -> None:
        self._future = future

    def result(self) -> T:
        return self._future.result()

    def wait(self) -> BaseException | None:
        """Wait for the part to end; what it raised, or None (for a caller that is
        already raising and must not leave the part running past its own guards)."""
        return self._future.exception()


class _Worker:
    """The process's one worker thread, made on first use and again after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free = threading.Lock()  # held while the worker runs a part
        self._pool: ThreadPoolExecutor | None = None

    def run(self, part: Callable[[], T]) -> Pending[T]:
        if not self._free.acquire(blocking=False):
            return Pending(_ran_here(part))
        try:
            pool = self._executor()
            future = pool.submit(self._run_then_free, part)
        except BaseException:
            self._free.release()
            raise
        return Pending(future)

    def _run_then_free(self, part: Callable[[], T]) -> T:
        try:
            return part()
        finally:
            self._free.release()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="conceptgraph-query")
            return self._pool

    def after_fork(self) -> None:
        # a child's copy of the parent's executor has no thread behind it
        self._lock = threading.Lock()
        self._free = threading.Lock()
        self._pool = None


def _ran_here(part: Callable[[], T]) -> Future[T]:
    """``part`` run on this thread, as a done future (its value or what it raised)."""
    future: Future[T] = Future()
    try:
        future.set_result(part())
    except BaseException as exc:  # handed to the caller's result(), not swallowed
        future.set_exception(exc)
    return future


_WORKER = _Worker()


def run_beside(part: Callable[[], T]) -> Pending[T]:
    """Start ``part`` on the process's worker thread, or run it now on this one where
    the worker is busy; either way :meth:`Pending.result` gives its value."""
    return _WORKER.run(part)


@contextmanager
def part_beside(part: Callable[[], T], beside: bool = True) -> Iterator[Pending[T]]:
    """``part`` started by :func:`run_beside` (run here first where ``beside`` is False),
    for the body to work beside it. The part has ended when the context does, whatever
    happened: a body that raises waits for it, and what it raised besides is noted on
    the body's error, not dropped; a part that failed unasked fails the context."""
    pending = run_beside(part) if beside else Pending(_ran_here(part))
    try:
        yield pending
    except BaseException as exc:
        also = pending.wait()
        if also is not None and also is not exc:
            exc.add_note(f"a part of the query beside it also failed: {also!r}")
        raise
    pending.result()


class _OneBlasThread:
    """Process-wide: OpenBLAS on one thread from the first holder in to the last one out.

    OpenBLAS built on pthreads keeps one count for the process, so it is set here
    through its own functions. threadpoolctl is used only to find the loaded libraries:
    its own setter obeys only the first Python thread that ever set a count, and a
    query may come from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._before: list[int] = []
        self._found: list[tuple[Any, Any]] | None = None  # (get, set) per library

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if not self._holders:
                self._before = self.threads()
                for _, set_count in self._libraries():
                    set_count(1)
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if not self._holders:
                    self._give_back()

    def _give_back(self) -> None:
        for (_, set_count), count in zip(self._libraries(), self._before, strict=True):
            set_count(count)

    def threads(self) -> list[int]:
        """Each loaded OpenBLAS's thread count now."""
        return [int(get_count()) for get_count, _ in self._libraries()]

    def _libraries(self) -> list[tuple[Any, Any]]:
        if self._found is None:  # the BLAS libraries loaded by now: numpy's and scipy's
            self._found = _openblas_counts()
        return self._found

    def after_fork(self) -> None:
        # a fork during a query: the child gets the count back and no holders
        if self._holders:
            self._give_back()
        self._lock = threading.Lock()
        self._holders = 0


def _openblas_counts() -> list[tuple[Any, Any]]:
    """The thread-count getter and setter of each loaded OpenBLAS that runs on its own
    threads (pthreads): an OpenMP build takes its count per calling thread."""
    import ctypes

    from threadpoolctl import ThreadpoolController

    found = []
    for info in ThreadpoolController().select(internal_api="openblas").info():
        if info.get("threading_layer") == "openmp":
            continue
        library = ctypes.CDLL(info["filepath"])  # loaded already: the same handle
        for prefix, suffix in (("", ""), ("scipy_", "64_"), ("scipy_", ""), ("", "64_")):
            get_count = getattr(library, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_count = getattr(library, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get_count is not None and set_count is not None:
                get_count.restype, set_count.argtypes = ctypes.c_int, [ctypes.c_int]
                found.append((get_count, set_count))
                break
    return found


_ONE_BLAS_THREAD = _OneBlasThread()


def blas_on_one_thread() -> AbstractContextManager[None]:
    """A context in which BLAS runs on one thread (see the module's docstring); holders
    may nest and overlap across threads, and the count is given back when the last
    leaves."""
    return _ONE_BLAS_THREAD.held()


def blas_threads() -> list[int]:
    """Each loaded OpenBLAS's thread count now (what the context changes)."""
    return _ONE_BLAS_THREAD.threads()


def prepare_side_thread() -> None:
    """Start the worker thread and find the BLAS libraries now, not in a first query
    (their discovery reads every loaded library's path: about 10 ms)."""
    _ONE_BLAS_THREAD.threads()
    run_beside(lambda: None).result()


def _after_fork_in_child() -> None:
    _WORKER.after_fork()
    _ONE_BLAS_THREAD.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
