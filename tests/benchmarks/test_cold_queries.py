"""The cold-queries benchmark's per-pass figures, worked out by hand."""

from __future__ import annotations

from benchmarks.cold_queries import pass_figures


def test_a_pass_reports_percentiles_and_reads_per_question() -> None:
    # four questions; 10 faults and 8 MiB read over the pass
    figures = pass_figures([10.0, 20.0, 30.0, 40.0], (100, 2**20), (110, 9 * 2**20))
    assert figures == {"p50_ms": 25.0, "p95_ms": 38.5,
                       "major_faults_per_query": 2.5, "mb_read_per_query": 2.0}
