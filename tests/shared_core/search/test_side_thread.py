"""A query's second thread: where its part runs, errors, BLAS's thread count, forks."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from shared_core.search.candidates import CandidateSimilarity, PositiveView, similarity_beside
from shared_core.search.side_thread import (
    blas_on_one_thread,
    blas_threads,
    part_beside,
    run_beside,
)
from shared_core.search.vector_index import ExactVectorIndex


def test_a_part_runs_on_the_worker_thread_and_gives_its_value() -> None:
    pending = run_beside(lambda: (threading.current_thread().name, 6 * 7))
    name, value = pending.result()
    assert value == 42
    assert name.startswith("conceptgraph-query")
    assert name != threading.current_thread().name


def test_a_part_runs_on_the_calling_thread_while_the_worker_is_busy() -> None:
    release = threading.Event()
    started = threading.Event()

    def hold() -> str:
        started.set()
        assert release.wait(10)
        return threading.current_thread().name

    held = run_beside(hold)
    assert started.wait(10)
    try:
        here = run_beside(lambda: threading.current_thread().name)
        assert here.result() == threading.current_thread().name  # ran here, did not queue
    finally:
        release.set()
    assert held.result().startswith("conceptgraph-query")
    # free again: the next part goes to the worker
    assert run_beside(lambda: threading.current_thread().name).result() != (
        threading.current_thread().name)


@pytest.mark.parametrize("busy", [False, True])
def test_what_a_part_raises_is_raised_by_result(busy: bool) -> None:
    release = threading.Event()
    blocker = run_beside(lambda: release.wait(10)) if busy else None

    def fail() -> None:
        raise KeyError("row 7")

    try:
        pending = run_beside(fail)
        with pytest.raises(KeyError, match="row 7"):
            pending.result()
        assert isinstance(pending.wait(), KeyError)
    finally:
        release.set()
        if blocker is not None:
            assert blocker.result() is True


def test_a_part_beside_runs_while_the_body_does() -> None:
    body_ran = threading.Event()

    def part() -> str:  # finishes only once the body has run: the two overlap
        assert body_ran.wait(10)
        return threading.current_thread().name

    with part_beside(part) as pending:
        body_ran.set()
        name = pending.result()
    assert name.startswith("conceptgraph-query")


def test_a_part_not_beside_runs_here_before_the_body() -> None:
    order: list[str] = []
    with part_beside(lambda: order.append(threading.current_thread().name), beside=False):
        order.append("body")
    assert order == [threading.current_thread().name, "body"]


def test_a_body_that_fails_waits_for_the_part_and_notes_what_it_raised() -> None:
    ended = threading.Event()

    def part() -> None:
        time.sleep(0.05)
        ended.set()
        raise KeyError("row 3")

    with pytest.raises(RuntimeError, match="views") as raised, part_beside(part):
        raise RuntimeError("views failed")
    assert ended.is_set()  # not left running past the context
    assert any("row 3" in note for note in getattr(raised.value, "__notes__", []))


def test_a_part_beside_that_failed_unasked_fails_the_context() -> None:
    def part() -> None:
        raise KeyError("row 3")

    with pytest.raises(KeyError, match="row 3"), part_beside(part):
        pass


def test_blas_runs_on_one_thread_from_the_first_holder_in_to_the_last_out() -> None:
    with threadpool_limits(2, user_api="blas"):
        if set(blas_threads()) != {2}:
            pytest.skip("no BLAS library here takes a thread count")
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        seen: dict[str, list[int]] = {}

        def holder_a() -> None:
            with blas_on_one_thread():
                a_in.set()
                assert b_in.wait(10)
                seen["a, both in"] = blas_threads()
            a_out.set()

        thread = threading.Thread(target=holder_a)
        thread.start()
        assert a_in.wait(10)
        with blas_on_one_thread():
            b_in.set()
            assert a_out.wait(10)
            seen["b, after a left"] = blas_threads()
            with blas_on_one_thread():  # nested on one thread
                seen["b, nested"] = blas_threads()
            seen["b, nested left"] = blas_threads()
        thread.join(10)
        seen["after both"] = blas_threads()
    assert {key: set(value) for key, value in seen.items()} == {
        "a, both in": {1}, "b, after a left": {1}, "b, nested": {1}, "b, nested left": {1},
        "after both": {2}}


def test_the_count_is_given_back_after_an_error() -> None:
    with threadpool_limits(2, user_api="blas"):
        if set(blas_threads()) != {2}:
            pytest.skip("no BLAS library here takes a thread count")
        with pytest.raises(RuntimeError, match="mid-query"), blas_on_one_thread():
            assert set(blas_threads()) == {1}
            raise RuntimeError("mid-query")
        assert set(blas_threads()) == {2}


def _child_runs_a_part(out: multiprocessing.Queue[object]) -> None:
    out.put(run_beside(lambda: threading.current_thread().name).result())


def test_a_forked_child_starts_its_own_worker() -> None:
    assert run_beside(lambda: 1).result() == 1  # the parent's worker exists
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_child_runs_a_part, args=(out,))
    child.start()
    child.join(30)
    assert child.exitcode == 0  # a copy of the parent's executor would wait forever
    assert str(out.get(timeout=5)).startswith("conceptgraph-query")


def _similarity(scorer_names: list[str], fail: bool = False) -> CandidateSimilarity:
    rows = np.eye(6, dtype=np.float32)

    def scorer(units: np.ndarray) -> np.ndarray:
        scorer_names.append(threading.current_thread().name)
        if fail:
            raise ValueError("rows gone")
        return rows[units] @ query

    query = np.array([0.1, 0.9, 0.3, 0.0, 0.5, 0.2], dtype=np.float32)
    return CandidateSimilarity(ExactVectorIndex(rows), None, scorer, query, 6)


def test_the_started_best_units_are_the_ones_asked_for_and_found_beside() -> None:
    names: list[str] = []
    plain = _similarity([])
    with similarity_beside(_similarity(names), 3) as (started, lexical):
        assert lexical is None  # none asked for
        units, scores = started.top(3)
        assert started.n_units == 6
        assert started.score(np.array([4])).tolist() == pytest.approx([0.5])
    expected_units, expected_scores = plain.top(3)
    assert units.tolist() == expected_units.tolist() == [1, 4, 2]  # cosines .9, .5, .3
    assert scores.tolist() == expected_scores.tolist()
    assert names[0].startswith("conceptgraph-query")  # top(3) was found on the worker


def test_the_rank_sample_is_scored_beside_for_the_list_found_there() -> None:
    names: list[str] = []
    below = np.array([0, 3, 5])
    cosines = _similarity([]).score(below)  # float32, as the sample's are
    with similarity_beside(_similarity(names), 3) as (started, _):
        top_units, _ = started.top(3)
        scored_beside = len(names)
        ranks = started.ranks_below(below, cosines, top_units)
        assert len(names) == scored_beside  # nothing scored again on this thread
        # a list of another length needs a sample of its own, scored here
        shorter = started.ranks_below(below, cosines, np.array([1, 4]))
        assert len(names) == scored_beside + 1
    # cosines .1 .9 .3 .0 .5 .2: beyond the best three (units 1, 4, 2) come 5, 0, 3; the
    # sample is every unit here, so the ranks are exact
    assert ranks.tolist() == [5.0, 6.0, 4.0]
    # beyond the best two: 2 (.3), then 5, 0, 3
    assert shorter.tolist() == [5.0, 6.0, 4.0]
    assert all(name.startswith("conceptgraph-query") for name in names[:scored_beside])
    assert scored_beside == 2  # the best units' rescoring, then the sample's


class _RecordedView:
    """A BM25 view of units 0, 3 and 5 that notes the thread of every ``top``."""

    def __init__(self, made_on: list[str]) -> None:
        self.view = PositiveView(np.array([0, 3, 5]), np.array([1.5, 0.5, 1.5]))
        self.made_on = made_on

    def top(self, k: int | None) -> np.ndarray:
        self.made_on.append(f"top({k}) on {threading.current_thread().name}")
        return self.view.top(k)

    def ranks(self, units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
        return self.view.ranks(units, top_units)


def test_the_lexical_view_and_its_top_are_made_beside_after_the_units_search() -> None:
    names: list[str] = []
    made_on: list[str] = []

    def bm25_view() -> _RecordedView:
        made_on.append(threading.current_thread().name)
        made_on.append(f"after {len(names)} scorings")
        return _RecordedView(made_on)

    with similarity_beside(_similarity(names), 2, bm25_view) as (started, lexical):
        assert lexical is not None
        top = lexical.top(2)
        assert lexical.top(2) is top  # found beside, not again
        longer = lexical.top(3)  # another length: made here
        ranks = lexical.ranks(np.array([0, 1, 3, 5]), top)
        started.top(2)
    # 0 and 5 tie at 1.5 (the lower unit first), 3 is third, 1 has no score
    assert top.tolist() == [0, 5] and ranks.tolist() == [1.0, 0.0, 3.0, 2.0]
    assert longer.tolist() == [0, 5, 3]
    # on the worker, once, after the best units' rescoring and the sample's; then its top
    worker = made_on[0]
    assert worker.startswith("conceptgraph-query")
    assert made_on[1:] == ["after 2 scorings", f"top(2) on {worker}",
                           f"top(3) on {threading.current_thread().name}"]


def test_a_lexical_view_that_fails_fails_the_query() -> None:
    def broken_view() -> PositiveView:
        raise ValueError("postings unreadable")

    with pytest.raises(ValueError, match="postings unreadable"), similarity_beside(
            _similarity([]), 3, broken_view) as (_, lexical):
        assert lexical is not None
        lexical.top(2)

def test_a_query_that_fails_waits_for_its_part_and_notes_what_that_raised() -> None:
    with pytest.raises(RuntimeError, match="concept search") as raised, similarity_beside(
            _similarity([], fail=True), 3):
        raise RuntimeError("concept search failed")
    assert any("rows gone" in note for note in getattr(raised.value, "__notes__", []))


def test_a_part_that_fails_fails_the_query_that_asks_for_it() -> None:
    with pytest.raises(ValueError, match="rows gone"), similarity_beside(
            _similarity([], fail=True), 3) as (started, _):
        started.top(3)


def test_a_part_that_failed_unasked_still_fails_the_query() -> None:
    with pytest.raises(ValueError, match="rows gone"), similarity_beside(
            _similarity([], fail=True), 3):
        pass
