"""Paging advice on mapped arrays, read back from the kernel's own view (Linux's /proc)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from shared_core.paging import advise_random_reads, sequential_reads

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
