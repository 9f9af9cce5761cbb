"""Freed heap memory given back to the kernel (glibc's malloc_trim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_core.heap import give_back_free_heap

MB = 2**20


def anonymous_bytes() -> int:
    """The process's anonymous resident memory (``RssAnon`` in /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_free_blocks_between_live_ones_go_back_to_the_kernel() -> None:
    """200,000 blocks of about 1,000 bytes (malloc's, not Python's small-object pools), every
    hundredth kept: 198 MB freed in holes between live blocks, which free() alone keeps
    charged to the process and malloc_trim returns."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc")
    give_back_free_heap()
    blocks = [b"%06d" % i * 166 for i in range(200_000)]  # 996 bytes each, written
    kept = blocks[99::100]
    held = anonymous_bytes()
    del blocks
    freed = anonymous_bytes()
    if not give_back_free_heap():
        pytest.skip("this C library has no malloc_trim")
    after = anonymous_bytes()
    assert held - freed < 50 * MB  # free() returned little: the kept blocks pin the holes
    assert freed - after > 150 * MB  # of the 198 MB in the holes
    assert [k[:6] for k in kept[:2]] == [b"000099", b"000199"] and len(kept) == 2000
