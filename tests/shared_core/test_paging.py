"""Paging advice on mapped arrays, read back from the kernel's own view (Linux's /proc)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared_core import paging
from shared_core.paging import (
    advise_random_reads,
    read_rows_ahead,
    row_page_ranges,
    sequential_reads,
)
from shared_core.state.rows import VectorRows

needs_smaps = pytest.mark.skipif(not Path("/proc/self/smaps").exists(),
                                 reason="the kernel shows a mapping's advice in Linux's /proc")
pytestmark = needs_smaps


def advice_where(named: Callable[[str, int, int], bool]) -> set[str]:
    """The kernel's flags (Linux's /proc) of this process's mappings that ``named`` (their
    file name, first and end address) picks, e.g. ``rr`` for MADV_RANDOM."""
    flags: set[str] = set()
    mapped_here = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header line
            first, end = (int(address, 16) for address in fields[0].split("-"))
            mapped_here = named(fields[5] if len(fields) == 6 else "", first, end)
        elif mapped_here and fields[0] == "VmFlags:":
            flags.update(line.split()[1:])
    return flags


def advice_of(file: Path) -> set[str]:
    """The kernel's flags of this process's mappings of ``file``."""
    return advice_where(lambda name, first, end: name == str(file.resolve()))


def advice_at(array: np.ndarray) -> set[str]:
    """The kernel's flags of the mapping that holds ``array``'s first byte (a spill file
    has no name to find it by: an ``O_TMPFILE``, or unlinked)."""
    address = int(array.__array_interface__["data"][0])
    return advice_where(lambda name, first, end: first <= address < end)


def mapped_rows(tmp_path: Path, rows: int = 64, dim: int = 8) -> tuple[Path, np.ndarray]:
    path = tmp_path / "rows.npy"
    np.save(path, np.arange(rows * dim, dtype=np.float32).reshape(rows, dim))
    return path, np.load(path, mmap_mode="r")


def test_advice_for_a_slice_reaches_the_whole_map_and_stays(tmp_path: Path) -> None:
    path, rows = mapped_rows(tmp_path)
    assert advise_random_reads(rows[10:20]) is True
    assert "rr" in advice_of(path)


def test_arrays_on_the_heap_are_not_advised_and_raise_nothing() -> None:
    rows = np.zeros((4, 4), dtype=np.float32)
    assert advise_random_reads(rows) is False
    with sequential_reads(rows) as advised:
        assert advised is False


def test_sequential_reads_leave_each_map_with_the_advice_it_had_for_good(tmp_path: Path) -> None:
    # a save copies rows in order: read-ahead inside, the queries' random advice after
    path, rows = mapped_rows(tmp_path)
    other_path = tmp_path / "other.npy"
    np.save(other_path, np.ones((8, 8), dtype=np.float32))
    other = np.load(other_path, mmap_mode="r")
    advise_random_reads(rows)
    with sequential_reads(rows), sequential_reads(other):
        assert "sr" in advice_of(path) and "rr" not in advice_of(path)
        assert "sr" in advice_of(other_path)
    assert "rr" in advice_of(path) and "sr" not in advice_of(path)
    assert not {"rr", "sr"} & advice_of(other_path)


def test_row_page_ranges_merge_rows_whose_pages_touch() -> None:
    # 1,536-byte rows from byte 128: rows 0-2 span bytes 128-4,736 (pages 0-8,192), rows
    # 10-11 span 15,488-18,560 (pages 12,288-20,480), row 50 76,928-78,464 (73,728-81,920)
    starts, ends = row_page_ranges(np.array([11, 0, 2, 1, 10, 50]), 1536, 128, 4096)
    assert starts.tolist() == [0, 12288, 73728]
    assert ends.tolist() == [8192, 20480, 81920]
    # row 5 spans 7,808-9,344 (pages 4,096-12,288): it overlaps the first run and touches
    # the second, so the three become one; order and repeats do not matter
    starts, ends = row_page_ranges(np.array([11, 0, 5, 2, 1, 10, 50, 0]), 1536, 128, 4096)
    assert starts.tolist() == [0, 73728]
    assert ends.tolist() == [20480, 81920]
    starts, ends = row_page_ranges(np.zeros(0, dtype=np.int64), 1536, 0, 4096)
    assert len(starts) == len(ends) == 0


def cold_rows(path: Path, rows: int = 256, dim: int = 384) -> np.ndarray:
    """A file of float32 rows written to disk and dropped from the page cache, mapped;
    skips where the file system keeps it in memory (tmpfs)."""
    values = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim)
    np.save(path, values)
    mapped = np.load(path, mmap_mode="r")  # reading its header reads the file ahead: drop after
    drop_from_cache(path)
    if resident_share(mapped) > 0:
        pytest.skip("this file system keeps the file in the page cache (tmpfs)")
    return mapped


def drop_from_cache(path: Path) -> None:
    """Write ``path`` to disk and drop its pages from the page cache (those no process
    has mapped in)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def resident_share(array: np.ndarray) -> float:
    """The share of ``array``'s pages in memory, as the kernel tells it (``mincore``)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    start = int(array.__array_interface__["data"][0])
    first = start - start % mmap.PAGESIZE
    length = start + array.nbytes - first
    pages = (ctypes.c_ubyte * -(-length // mmap.PAGESIZE))()
    assert libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(length), pages) == 0
    return sum(page & 1 for page in pages) / len(pages)


def rows_resident(array: np.ndarray, rows: list[int], wait_s: float = 5.0) -> bool:
    """Whether ``rows`` of ``array`` come into memory within ``wait_s`` (the kernel reads
    what it was asked for in the background) without being touched."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all(resident_share(array[row:row + 1]) == 1 for row in rows):
            return True
        time.sleep(0.01)
    return False


def test_rows_read_ahead_are_read_in_before_they_are_touched(tmp_path: Path) -> None:
    rows = cold_rows(tmp_path / "rows.npy")
    assert read_rows_ahead(rows, np.array([3, 200])) == 0  # not advised random reads
    advise_random_reads(rows)
    # rows 3-4 share a page run, 100 and 200 are alone: three ranges asked for
    assert read_rows_ahead(rows, np.array([200, 3, 4, 100])) == 3
    assert rows_resident(rows, [3, 4, 100, 200])
    assert resident_share(rows[120:180]) == 0  # nothing else was read
    # once they are in memory, nothing is asked for again
    assert read_rows_ahead(rows, np.array([3, 4, 100, 200])) == 0
    np.testing.assert_array_equal(rows[[3, 200]][:, 0], [3 * 384, 200 * 384])


def test_rows_over_mapped_arrays_are_read_ahead_in_the_array_each_sits_in(
        tmp_path: Path) -> None:
    first, second = cold_rows(tmp_path / "first.npy"), cold_rows(tmp_path / "second.npy")
    advise_random_reads(first)
    advise_random_reads(second)
    # position 0 is the second array's row 10, position 1 the first's row 100
    rows = VectorRows((first, second), np.array([256 + 10, 100, 256 + 200]))
    assert read_rows_ahead(rows, np.array([0, 1])) == 2
    assert rows_resident(second, [10]) and rows_resident(first, [100])
    assert resident_share(second[150:250]) == 0  # position 2 was not asked for


def test_rows_on_the_heap_are_not_read_ahead() -> None:
    rows = np.zeros((8, 4), dtype=np.float32)
    assert read_rows_ahead(rows, np.array([1, 2])) == 0
    assert read_rows_ahead(VectorRows((rows,), np.arange(8)), np.array([1, 2])) == 0


@given(rows=st.lists(st.integers(0, 2_000), max_size=60),
       row_bytes=st.integers(1, 9_000), first_byte=st.integers(0, 5_000))
def test_row_page_ranges_cover_the_rows_pages_and_no_others(
        rows: list[int], row_bytes: int, first_byte: int) -> None:
    page = 4096
    starts, ends = row_page_ranges(np.array(rows, dtype=np.int64), row_bytes, first_byte, page)
    wanted = {p for row in rows for p in range((first_byte + row * row_bytes) // page,
                                               -(-(first_byte + (row + 1) * row_bytes) // page))}
    covered = [p for start, end in zip(starts, ends, strict=True)
               for p in range(start // page, end // page)]
    assert sorted(covered) == sorted(wanted)  # every page once, none not asked for
    assert np.all(starts % page == 0) and np.all(ends % page == 0)
    assert np.all(starts[1:] > ends[:-1])  # apart: touching ranges were merged


def test_no_probes_turn_the_read_ahead_off(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rows = cold_rows(tmp_path / "rows.npy")
    advise_random_reads(rows)
    monkeypatch.setattr(paging, "READ_AHEAD_PROBES", 0)
    assert read_rows_ahead(rows, np.array([3, 100])) == 0
    time.sleep(0.2)
    assert resident_share(rows[3:4]) == resident_share(rows[100:101]) == 0
