"""Freed heap memory given back to the kernel once a build or an update is done.

glibc's malloc keeps what a process frees for its next allocations, and hands
back to the kernel only the free memory at the top of its heap. A build frees
many small and mid-sized blocks (each batch's texts and term lists, the graph's
intermediate arrays below glibc's 32 MB mmap threshold) spread through the heap,
so they stay charged to the process as anonymous memory it no longer uses. In
a memory limit that is room the page cache needs for the rows a query reads.
``malloc_trim`` returns every free page, wherever it lies. Other C libraries
(musl, macOS, Windows) have no such call, and nothing is done there.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, where the process's C library has it."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)  # the symbols the process already has: its own C library
    trim = getattr(libc, "malloc_trim", None)  # absent under musl
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_MALLOC_TRIM = _find_malloc_trim()


def give_back_free_heap() -> bool:
    """Return the C heap's free pages to the kernel; whether this C library can."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
