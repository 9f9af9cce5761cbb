"""How the kernel reads a memory-mapped array in: advice for arrays read at random.

By default a page fault on a mapped file reads the pages around it too, up to the
disk's read-ahead size (``/sys/block/*/queue/read_ahead_kb``: 128 KB by default,
8 MB on the machine measured here). That suits a scan. A query of an index with an
approximate vector index instead touches scattered 1.5 KB rows of a large map (a
few thousand rows). Once the file no longer fits in memory, read-around multiplies
what it reads from disk: a 1 M index in an 8 GiB memory cgroup answered in 2.4 s p50
with it and 0.17-0.25 s without. (faiss building HNSW had read every row once in
shuffled order too; it now reads a block of coded rows at a time, ``search.ann``.)
``MADV_RANDOM`` turns read-around off. Pages already in memory are read as before, so
nothing changes where the file fits, and the advice never changes what is read, only how.

Without read-around, each row not in memory is still one fault that waits for its
own read: 2,000 scattered rows of the 1 M index's 6.8 GB of sentence vectors took
0.38-0.43 s from a cold cache. :func:`read_rows_ahead` first asks the kernel for all
of their pages (``MADV_WILLNEED``, one call per run of pages), which queues the reads
together, and the same rows then took 27-37 ms (``benchmarks/results/NOTES.md``,
fifty-ninth round). Where the rows are already in memory it asks for nothing: it
checks a few of them first (``mincore``), since each request costs about a
microsecond even for a page in memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import weakref
from collections.abc import Iterator
from functools import cache

import numpy as np

# maps advised MADV_RANDOM for as long as they are mapped: a block of random reads
# over one of them leaves its advice as it was
_ADVISED_RANDOM: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
# runs of pages checked for residency before the pages of rows read at random are asked
# for; 0 turns the asking off (``benchmarks.cold_queries --no-read-ahead`` measures that)
READ_AHEAD_PROBES = 8


def _mapping(array: object) -> mmap.mmap | None:
    """The ``mmap`` behind a numpy memmap or a view of one, if any."""
    base = array
    while base is not None:
        mapped = getattr(base, "_mmap", None)
        if isinstance(mapped, mmap.mmap):
            return mapped
        base = getattr(base, "base", None)
    return None


def _mappings(array: object) -> list[mmap.mmap]:
    """The maps behind ``array``: its own, or those of the arrays its rows sit in (rows
    left in place by an update, ``state.rows.VectorRows``)."""
    runs = getattr(array, "runs", None)
    parts = runs if isinstance(runs, tuple) else (array,)
    found = [mapped for part in parts if (mapped := _mapping(part)) is not None]
    return list({id(mapped): mapped for mapped in found}.values())


def _advise(mapped: mmap.mmap | None, advice_name: str) -> bool:
    advice = getattr(mmap, advice_name, None)
    if mapped is None or advice is None:  # not a mapped file, or no madvise (Windows)
        return False
    mapped.madvise(advice)
    return True


def advise_random_reads(array: object) -> bool:
    """Advise the maps behind ``array`` ``MADV_RANDOM`` for as long as they are mapped;
    whether any was advised (none where it is not a mapped file or ``mmap`` has no
    ``madvise``)."""
    advised = False
    for mapped in _mappings(array):
        if _advise(mapped, "MADV_RANDOM"):
            _ADVISED_RANDOM.add(mapped)
            advised = True
    return advised


def _default_after(mapped: mmap.mmap) -> str:
    """The advice a map returns to after a block: random reads if advised so for good."""
    return "MADV_RANDOM" if mapped in _ADVISED_RANDOM else "MADV_NORMAL"


@contextlib.contextmanager
def _advised_block(array: object, advice_name: str) -> Iterator[bool]:
    maps = [mapped for mapped in _mappings(array) if _advise(mapped, advice_name)]
    try:
        yield bool(maps)
    finally:
        for mapped in maps:
            _advise(mapped, _default_after(mapped))


def sequential_reads(array: object) -> contextlib.AbstractContextManager[bool]:
    """``MADV_SEQUENTIAL`` on the maps behind ``array`` inside the block (a save copying
    rows in order: read-ahead, even where queries advised random reads), and after it
    the advice each map had for good."""
    return _advised_block(array, "MADV_SEQUENTIAL")


def row_page_ranges(rows: np.ndarray, row_bytes: int, first_byte: int,
                    page: int = mmap.PAGESIZE) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges, page-aligned, that hold ``rows`` of an array whose rows are
    ``row_bytes`` apart from ``first_byte`` into its map: ``(starts, ends)``, one range
    per run of rows whose pages touch or overlap, in order."""
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    if not len(rows):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    starts, ends = _page_span(rows, row_bytes, first_byte, page)
    opens = np.ones(len(rows), dtype=bool)
    opens[1:] = starts[1:] > ends[:-1]  # ends grow with the rows: one comparison merges
    closing = np.append(np.flatnonzero(opens)[1:], len(rows)) - 1
    return starts[opens], ends[closing]


def _page_span(rows: np.ndarray, row_bytes: int, first_byte: int,
               page: int = mmap.PAGESIZE) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first and end byte, widened to whole pages."""
    starts = first_byte + rows * row_bytes
    return starts // page * page, -(-(starts + row_bytes) // page) * page


def read_rows_ahead(array: object, rows: np.ndarray) -> int:
    """Ask the kernel for the pages of ``rows`` (positions) of ``array`` at once, before
    they are gathered; the number of page ranges asked for.

    Only maps advised random reads (:func:`advise_random_reads`) are asked for, and
    only where a few of the ranges (``READ_AHEAD_PROBES``) are not all in memory. An
    array may be a mapped array or rows over mapped arrays (``state.rows.VectorRows``);
    anything else is left alone (0). The request changes only when pages are read.
    """
    rows = np.asarray(rows, dtype=np.int64)
    located = getattr(array, "located", None)
    if located is None:
        return _read_ahead(array, rows)
    if not any(mapped in _ADVISED_RANDOM for mapped in _mappings(array)):
        return 0
    return sum(_read_ahead(run, held) for run, held in located(rows))


def _read_ahead(array: object, rows: np.ndarray) -> int:
    mapped = _mapping(array)
    advice = getattr(mmap, "MADV_WILLNEED", None)
    if (READ_AHEAD_PROBES <= 0 or mapped is None or advice is None
            or mapped not in _ADVISED_RANDOM or not len(rows)
            or not isinstance(array, np.ndarray) or array.ndim != 2
            or array.strides[1] != array.itemsize):
        return 0
    map_address = _map_address(mapped)
    first_byte = int(array.__array_interface__["data"][0]) - map_address
    row_bytes = int(array.strides[0])
    probes = min(READ_AHEAD_PROBES, len(rows))
    probed = rows[np.arange(probes) * (len(rows) - 1) // max(probes - 1, 1)]
    probe_starts, probe_ends = _page_span(probed, row_bytes, first_byte)
    if all(_resident(map_address + start, end - start)
           for start, end in zip(probe_starts.tolist(), probe_ends.tolist(), strict=True)):
        return 0
    starts, ends = row_page_ranges(rows, row_bytes, first_byte)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        mapped.madvise(advice, start, end - start)
    return len(starts)


_MAP_ADDRESSES: weakref.WeakKeyDictionary[mmap.mmap, int] = weakref.WeakKeyDictionary()


def _map_address(mapped: mmap.mmap) -> int:
    """Where ``mapped`` starts in this process's memory."""
    address = _MAP_ADDRESSES.get(mapped)
    if address is None:
        address = int(np.frombuffer(mapped, dtype=np.uint8, count=1).ctypes.data)
        _MAP_ADDRESSES[mapped] = address
    return address


@cache
def _mincore() -> object | None:
    """libc's ``mincore``, where the C library has one."""
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name, use_errno=True).mincore
    except (OSError, AttributeError):  # no C library found, or no mincore in it
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    function.restype = ctypes.c_int
    return function


def _resident(address: int, length: int) -> bool:
    """Whether every page of the ``length`` bytes at page-aligned ``address`` is in
    memory; ``False`` where that cannot be told."""
    mincore = _mincore()
    if mincore is None:
        return False
    pages = (ctypes.c_ubyte * -(-length // mmap.PAGESIZE))()
    if mincore(address, length, pages) != 0:  # type: ignore[operator]
        return False
    return all(page & 1 for page in pages)
