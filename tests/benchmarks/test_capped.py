"""The memory-cgroup runner: its reading of ``memory.stat``, and a real run where allowed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.capped import MemoryCgroup, memory_stat, run_capped

V1_STAT = """cache 4096
rss 8192
total_cache 2393931776
total_rss 6145208320
total_pgmajfault 1137521
"""
V2_STAT = """anon 6145208320
file 2393931776
pgfault 9000000
pgmajfault 1137521
"""


@pytest.mark.parametrize(("text", "version"), [(V1_STAT, 1), (V2_STAT, 2)])
def test_memory_stat_reads_the_hierarchys_totals_under_either_version(
        text: str, version: int) -> None:
    assert memory_stat(text, version) == {"major_faults": 1137521,
                                          "anon_bytes": 6145208320,
                                          "cache_bytes": 2393931776}


def test_a_machine_without_a_memory_controller_is_refused_with_the_reason(
        tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    with pytest.raises(RuntimeError, match="no memory cgroup"):
        MemoryCgroup.create(2**30, root=tmp_path)


def test_no_command_is_refused() -> None:
    with pytest.raises(ValueError, match="command"):
        run_capped([], 2**30, drop_caches=False)


def _cgroup_or_skip(limit: int) -> None:
    try:
        MemoryCgroup.create(limit).remove()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"no writable memory cgroup here: {exc}")


def test_a_command_under_the_limit_runs_and_one_over_it_is_killed() -> None:
    _cgroup_or_skip(2**30)
    allocate = [sys.executable, "-c", "b = b'x' * (200 * 2**20)"]  # every page written
    fits = run_capped(allocate, 2**30, drop_caches=False)
    assert fits["exit"] == 0
    assert fits["peak_bytes"] is None or fits["peak_bytes"] >= 200 * 2**20  # the pages it touched
    over = run_capped(allocate, 100 * 2**20, drop_caches=False)
    assert over["exit"] == -9  # the kernel's OOM killer, as on a machine of 100 MB
