"""The touched-pair count behind the refresh's cost, on a corpus small enough to check."""

from __future__ import annotations

import pytest

from benchmarks import refresh_share

SENTENCES = [
    "Ada Lovelace wrote the first program.", "Charles Babbage designed the engine.",
    "The engine used punched cards.", "Punched cards came from the loom.",
    "Grace Hopper wrote the first compiler.", "The compiler translated programs.",
    "Alan Turing described a universal machine.", "The machine read a tape.",
]


def test_changed_concepts_and_touched_pairs_are_consistent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refresh_share, "sentence_pool", lambda data: SENTENCES)
    row = refresh_share.touched_share(200)
    assert row["added"] == 2
    assert 0 < row["changed_concepts"] <= row["concepts"]
    assert 0 < row["pairs_touched"] <= row["pairs_passing_theta_co"]
    assert row["touched_share"] == round(row["pairs_touched"] / row["pairs_passing_theta_co"], 3)
