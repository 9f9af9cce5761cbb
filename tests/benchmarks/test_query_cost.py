"""The query-cost benchmark's command line: which knobs and values a sweep queries with."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.query_cost import parse_sweep


def test_a_sweep_names_a_knob_and_its_values_none_included() -> None:
    assert parse_sweep("walk_postings=none,50000") == ("walk_postings", [None, 50000])
    assert parse_sweep("candidates=500") == ("candidates", [500])
    assert parse_sweep("concept_search=hnsw,exact") == ("concept_search", ["hnsw", "exact"])


@pytest.mark.parametrize("spec", ["walk_postings", "=5", "candidates="])
def test_a_malformed_sweep_is_refused(spec: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="knob=value"):
        parse_sweep(spec)
