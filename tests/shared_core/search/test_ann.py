"""HNSW segments: where an update puts new rows, and a search across segments."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from shared_core.search import ann
from shared_core.search.ann import (
    EF_CONSTRUCTION,
    GROW_SHARE,
    LATER_SEGMENT_K,
    MAX_SEGMENTS,
    ROW_CODE_MAX,
    HnswSegments,
    HnswVectorIndex,
    coded_rows,
    one_query_search,
    reserve_rows,
    row_scale,
    segment_file,
    segment_plan,
)
from tests.shared_core.test_paging import (
    advice_of,
    drop_from_cache,
    needs_smaps,
    resident_share,
)


@pytest.mark.parametrize(("sizes", "added", "plan"), [
    ([100], 5, "append"),  # the first segment is never copied
    ([100, 5], 5, "grow"),  # 5 + 5 = 10 <= 110 / 8 = 13.75
    ([100, 5], 9, "grow"),  # 14 <= 114 / 8 = 14.25
    ([100, 5], 10, "append"),  # 15 > 115 / 8 = 14.375
    ([100, 10, 10], 10, "append"),  # 20 > 130 / 8: a third later segment
    ([100, 10, 10, 10], 10, "merge"),  # four segments; 30 + 10 <= 100
    ([100, 40, 30, 20], 10, "merge"),  # 90 + 10 = 100, still no more than the first
    ([100, 40, 30, 20], 11, "rebuild"),  # 101 later rows outgrow the first
    ([], 10, "rebuild"),  # nothing to add to
])
def test_segment_plan_by_hand(sizes: list[int], added: int, plan: str) -> None:
    assert (GROW_SHARE, MAX_SEGMENTS) == (1 / 8, 4)  # the figures the cases were worked with
    assert segment_plan(sizes, added) == plan


def test_repeated_one_percent_adds_copy_no_more_than_an_eighth_and_keep_few_segments() -> None:
    """A million rows and a hundred 1 % adds, planned as an index would apply them."""
    sizes, copied, rebuilt = [1_000_000], 0, 0
    for _ in range(100):
        added = sum(sizes) // 100
        plan = segment_plan(sizes, added)
        if plan == "grow":
            copied = max(copied, sizes[-1])
            sizes[-1] += added
        elif plan == "append":
            sizes.append(added)
        elif plan == "merge":
            rebuilt = max(rebuilt, sum(sizes[1:]) + added)
            sizes = [sizes[0], sum(sizes[1:]) + added]
        else:
            rebuilt = max(rebuilt, sum(sizes) + added)
            sizes = [sum(sizes) + added]
        assert len(sizes) <= MAX_SEGMENTS
    assert copied <= GROW_SHARE * sum(sizes)
    assert sum(sizes) == pytest.approx(1_000_000 * 1.01 ** 100, rel=0.01)


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_search_across_segments_numbers_rows_as_one_index() -> None:
    vectors = unit_rows(90, 32, seed=1)
    segments = HnswSegments((HnswVectorIndex.build(vectors[:50]),
                             HnswVectorIndex.build(vectors[50:80]),
                             HnswVectorIndex.build(vectors[80:])))
    assert len(segments) == 90 and segments.sizes() == [50, 30, 10]
    for row in (0, 49, 50, 79, 80, 89):  # each vector's best match is itself
        rows, scores = segments.search(vectors[row], 5)
        assert rows[0] == row and len(set(rows.tolist())) == 5
        assert np.all(np.diff(scores) <= 0)
    rows, _ = segments.search(vectors[0], 200)  # more than any segment holds
    assert sorted(rows.tolist()) == list(range(90))


def _near(direction: np.ndarray, n: int, noise: float, seed: int) -> np.ndarray:
    rows = direction + noise * np.random.default_rng(seed).normal(size=(n, len(direction)))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_a_later_segment_holding_the_best_rows_is_asked_for_as_many_as_the_answer() -> None:
    query = unit_rows(1, 16, seed=3)[0]
    first = HnswVectorIndex.build(unit_rows(300, 16, seed=4))  # cosines with the query ~0
    later = HnswVectorIndex.build(_near(query, 300, 0.05, seed=5))  # all ~0.99
    k = 250
    assert k > LATER_SEGMENT_K  # its first ask (one beam) falls short of the answer
    rows, scores = HnswSegments((first, later)).search(query, k)
    # its 128th row beats the first segment's 250th, so it is asked again, for all 250:
    # the answer is the later segment's own 250 best, numbered after the first's rows
    own_rows, own_scores = later.search(query, k)
    assert sorted(rows.tolist()) == sorted((own_rows + 300).tolist())
    np.testing.assert_array_equal(np.sort(scores), np.sort(own_scores))
    assert np.all(np.diff(scores) <= 0)


def test_a_later_segment_below_the_floor_adds_nothing() -> None:
    query = unit_rows(1, 16, seed=6)[0]
    first = HnswVectorIndex.build(unit_rows(300, 16, seed=7))
    later = HnswVectorIndex.build(_near(-query, 300, 0.05, seed=8))  # all ~-0.99
    rows, scores = HnswSegments((first, later)).search(query, 250)
    own_rows, own_scores = first.search(query, 250)
    assert set(rows.tolist()) == set(own_rows.tolist())
    np.testing.assert_array_equal(np.sort(scores), np.sort(own_scores))


def test_grown_and_appended_segments_leave_the_index_they_came_from() -> None:
    vectors = unit_rows(40, 16, seed=2)
    one = HnswSegments.build(vectors[:30])
    two = one.with_segment(1, vectors[30:35])
    three = two.grown(vectors[35:])
    assert one.sizes() == [30] and two.sizes() == [30, 5] and three.sizes() == [30, 10]
    assert three.segments[0] is one.segments[0]  # never copied
    assert three.search(vectors[37], 1)[0].tolist() == [37]
    merged = three.with_segment(1, vectors[30:])
    assert merged.sizes() == [30, 10] and merged.segments[1] is not three.segments[1]


def test_the_construction_beam_is_kept_by_the_graph_its_copies_and_its_file(
        tmp_path: Path) -> None:
    # rows a copy appends are linked with the beam the graph was built with; faiss
    # saves it in the file, so a loaded graph grows alike
    import faiss

    vectors = unit_rows(60, 16, seed=4)
    assert HnswVectorIndex.build(vectors[:20]).index.hnsw.efConstruction == EF_CONSTRUCTION
    wide = HnswVectorIndex.build(vectors[:20], ef_construction=3 * EF_CONSTRUCTION)
    assert wide.with_rows(vectors[20:30]).index.hnsw.efConstruction == 3 * EF_CONSTRUCTION
    faiss.write_index(wide.index, str(tmp_path / "wide.faiss"))
    assert faiss.read_index(str(tmp_path / "wide.faiss")).hnsw.efConstruction == (
        3 * EF_CONSTRUCTION)
    segments = HnswSegments((wide,)).with_segment(1, vectors[30:], ef_construction=250)
    assert [s.index.hnsw.efConstruction for s in segments.segments] == [
        3 * EF_CONSTRUCTION, 250]


def test_segment_files_are_named_in_order() -> None:
    assert [segment_file(i) for i in range(3)] == ["ann.faiss", "ann.1.faiss", "ann.2.faiss"]


@needs_smaps
def test_a_build_over_mapped_rows_indexes_every_row_and_leaves_the_map_as_it_was(
        tmp_path: Path) -> None:
    # faiss is given a block of coded rows at a time, read from the map in order: the
    # map keeps the kernel's default advice, which a save copying the rows wants
    path = tmp_path / "rows.npy"
    np.save(path, unit_rows(400, 16, seed=11))
    mapped = np.load(path, mmap_mode="r")
    index = HnswVectorIndex.build(mapped)
    assert len(index) == 400
    assert "rr" not in advice_of(path) and "mr" in advice_of(path)
    found = [int(index.search(np.asarray(row), 1)[0][0]) for row in mapped[::40]]
    assert found == list(range(0, 400, 40))  # each row is its own nearest


class _TeamRecorder:
    """A stand-in for a faiss index (not for our code): it records the OpenMP team size
    that a search would run with, and may wait for another thread or fail."""

    def __init__(self, inside: threading.Event | None = None,
                 leave: threading.Event | None = None, error: Exception | None = None) -> None:
        self.teams: list[int] = []
        self.inside, self.leave, self.error = inside, leave, error

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        self.teams.append(faiss.omp_get_max_threads())
        if self.inside is not None and self.leave is not None:
            self.inside.set()
            assert self.leave.wait(10)
        if self.error is not None:
            raise self.error
        return np.zeros((len(query), k), dtype=np.float32), np.zeros((len(query), k),
                                                                     dtype=np.int64)


@contextmanager
def this_threads_team(size: int) -> Iterator[None]:
    """This thread's OpenMP team set to ``size`` for the block, then as it was."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(size)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def test_one_query_searches_on_a_team_of_one_and_gives_the_thread_its_count_back() -> None:
    import faiss

    with this_threads_team(3):
        recorder = _TeamRecorder()
        one_query_search(recorder, np.ones(4), 2)
        assert recorder.teams == [1]
        assert faiss.omp_get_max_threads() == 3
        failing = _TeamRecorder(error=RuntimeError("faiss failed"))
        with pytest.raises(RuntimeError, match="faiss failed"):
            one_query_search(failing, np.ones(4), 2)
        assert failing.teams == [1]
        assert faiss.omp_get_max_threads() == 3  # given back after an error too


def test_a_query_team_of_one_leaves_other_threads_teams_alone() -> None:
    """OpenMP's thread count is per calling thread: a build on another thread keeps its
    team while a query searches on one."""
    import faiss

    inside, leave = threading.Event(), threading.Event()
    recorder = _TeamRecorder(inside, leave)
    searching = threading.Thread(target=one_query_search, args=(recorder, np.ones(4), 2))
    with this_threads_team(3):
        try:
            searching.start()
            assert inside.wait(10)
            assert faiss.omp_get_max_threads() == 3  # this thread's, while the other searches
            leave.set()
            searching.join(10)
            assert recorder.teams == [1]
        finally:
            leave.set()


def test_one_query_search_gives_what_the_index_gives_a_team_of_two() -> None:
    import faiss

    rng = np.random.default_rng(5)
    rows = rng.standard_normal((500, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)
    index = HnswVectorIndex.build(rows)
    params = faiss.SearchParametersHNSW(efSearch=64)
    with this_threads_team(2):
        scores, found = index.index.search(query[None], 10, params=params)
    one_scores, one_found = one_query_search(index.index, query, 10, params=params)
    np.testing.assert_array_equal(one_found, found)
    np.testing.assert_array_equal(one_scores, scores)
    assert one_found.shape == (1, 10)


def stored_codes(index: HnswVectorIndex) -> np.ndarray:
    """The signed byte codes faiss holds for a built (unmapped) index, one row each."""
    import faiss

    storage = faiss.downcast_index(index.index.storage)
    codes = faiss.vector_to_array(storage.codes).reshape(len(index), index.index.d)
    return codes.astype(np.int64) - 128  # faiss keeps a signed byte as its value + 128


def test_rows_are_held_as_their_scale_times_rounded_and_the_largest_value_is_127() -> None:
    rows = unit_rows(40, 8, seed=21)
    index = HnswVectorIndex.build(rows)
    assert index.scale == pytest.approx(ROW_CODE_MAX / np.abs(rows).max())
    expected = np.rint(rows.astype(np.float64) * index.scale)
    np.testing.assert_array_equal(stored_codes(index), expected)
    assert np.abs(stored_codes(index)).max() == ROW_CODE_MAX


def test_a_search_scores_coded_rows_against_the_coded_query_and_gives_back_cosines() -> None:
    rows = unit_rows(60, 16, seed=22)
    query = unit_rows(1, 16, seed=23)[0]
    index = HnswVectorIndex.build(rows)
    found, scores = index.search(query, 60)
    assert sorted(found.tolist()) == list(range(60))  # a beam wider than the rows
    query_scale = ROW_CODE_MAX / np.abs(query).max()
    # integers times integers, exactly, over the two scales
    by_hand = (np.rint(rows[found] * index.scale) @ np.rint(query * query_scale)
               / (index.scale * query_scale))
    np.testing.assert_allclose(scores, by_hand, rtol=1e-6)
    # each rounding moves a value by at most half a step: the cosine moves by at most
    # the two roundings times the other side's magnitudes, plus their product
    cosines = rows[found] @ query
    bound = (0.5 / index.scale * np.abs(query).sum() + 0.5 / query_scale
             * np.abs(rows[found]).sum(axis=1) + 0.25 * 16 / (index.scale * query_scale))
    assert np.all(np.abs(scores - cosines) <= bound + 1e-6)


def test_a_build_in_blocks_reads_the_scale_over_every_block_and_indexes_every_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann, "BUILD_BLOCK", 7)
    rows = unit_rows(50, 16, seed=24)
    rows[45] *= 0.0
    rows[45, 3] = 1.0  # the largest value sits in the last block
    index = HnswVectorIndex.build(rows)
    assert index.scale == pytest.approx(ROW_CODE_MAX / 1.0)
    assert len(index) == 50
    np.testing.assert_array_equal(stored_codes(index), np.rint(rows * index.scale))
    assert [int(index.search(row, 1)[0][0]) for row in rows] == list(range(50))


def test_rows_added_later_keep_the_scale_and_are_clipped_beyond_it() -> None:
    rows = 0.5 * unit_rows(20, 8, seed=25)  # the largest magnitude is half a unit's
    index = HnswVectorIndex.build(rows)
    grown = index.with_rows(unit_rows(2, 8, seed=26))
    assert grown.scale == index.scale
    added = stored_codes(grown)[20:]
    np.testing.assert_array_equal(added, coded_rows(unit_rows(2, 8, seed=26), index.scale))
    assert np.abs(added).max() == ROW_CODE_MAX  # clipped, not wrapped round to the far end


def test_the_scale_of_rows_with_no_magnitude_is_one() -> None:
    assert row_scale(np.zeros((3, 4), dtype=np.float32)) == 1.0
    assert row_scale(np.zeros((0, 4), dtype=np.float32)) == 1.0
    empty = HnswVectorIndex.build(np.zeros((0, 4), dtype=np.float32))
    assert len(empty) == 0 and empty.scale == 1.0


def test_reserved_rows_are_added_in_blocks_without_moving_the_codes_or_the_links() -> None:
    # a vector that outgrows its capacity moves to one twice as large beside the old copy:
    # sized first, the codes and links stay where they are through every block's add
    import faiss

    rows = coded_rows(unit_rows(300, 16, seed=27), 127.0)
    reserved = faiss.IndexHNSWSQ(16, faiss.ScalarQuantizer.QT_8bit_direct_signed, 32,
                                 faiss.METRIC_INNER_PRODUCT)
    plain = faiss.IndexHNSWSQ(16, faiss.ScalarQuantizer.QT_8bit_direct_signed, 32,
                              faiss.METRIC_INNER_PRODUCT)
    reserve_rows(reserved, 300)
    assert reserved.ntotal == 0
    places: dict[str, set[tuple[int, int]]] = {"reserved": set(), "plain": set()}
    for start in range(0, 300, 50):
        for name, index in (("reserved", reserved), ("plain", plain)):
            index.add(rows[start:start + 50])
            places[name].add((int(faiss.downcast_index(index.storage).codes.data()),
                              int(index.hnsw.neighbors.data())))
    assert len(places["reserved"]) == 1 and len(places["plain"]) > 1
    assert reserved.hnsw.neighbors.size() <= 300 * ann.LINK_SLOTS_PER_ROW
    with this_threads_team(1):  # one thread builds both alike: the same graph, the same answers
        one = faiss.IndexHNSWSQ(16, faiss.ScalarQuantizer.QT_8bit_direct_signed, 32,
                                faiss.METRIC_INNER_PRODUCT)
        two = faiss.IndexHNSWSQ(16, faiss.ScalarQuantizer.QT_8bit_direct_signed, 32,
                                faiss.METRIC_INNER_PRODUCT)
        reserve_rows(two, 300)
        for start in range(0, 300, 50):
            one.add(rows[start:start + 50])
            two.add(rows[start:start + 50])
        np.testing.assert_array_equal(one.search(rows[:20], 5)[1], two.search(rows[:20], 5)[1])


def test_reading_a_mapped_index_into_the_cache_reads_its_whole_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(3000, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    built = HnswVectorIndex.build(rows)
    path = tmp_path / "ann.faiss"
    built.save(path)
    drop_from_cache(path)
    view = np.memmap(path, dtype=np.uint8, mode="r")
    if resident_share(view) > 0:
        pytest.skip("this file system keeps the file in the page cache (tmpfs)")
    loaded = HnswVectorIndex.load(path, len(rows), rows.shape[1], scale=built.scale)
    # faiss reads the links as it loads; the codes (192 KB of the file's 1 MB) stay
    # mapped, unread, until a search visits them
    assert resident_share(view) < 0.9
    heap = HnswVectorIndex.build(rows[:20])  # on the heap: nothing to read
    assert HnswSegments((loaded, heap)).read_into_cache() == path.stat().st_size
    assert resident_share(view) == 1
