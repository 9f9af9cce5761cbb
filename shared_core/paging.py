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
"""

from __future__ import annotations

import contextlib
import mmap
import weakref
from collections.abc import Iterator

# maps advised MADV_RANDOM for as long as they are mapped: a block of random reads
# over one of them leaves its advice as it was
_ADVISED_RANDOM: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()


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
