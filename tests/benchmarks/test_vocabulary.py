"""The vocabulary benchmark: concepts counted over real prefixes and synthetic passages."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest

from benchmarks.scale import passages, sentence_pool
from benchmarks.vocabulary import counted, main, power_fit, real_passages
from tests.benchmarks.dev_sets import write_dev_set


def word(i: int) -> str:
    """A made-up word per number (Baa, Bab, ...): no stop word, no shared stem."""
    letters, i = "", i + 26 * 26
    while i:
        letters, i = string.ascii_lowercase[i % 26] + letters, i // 26
    return letters.capitalize()


def passage(p: int) -> str:
    """Three words no other passage has: each passage adds three concepts."""
    return " ".join(word(3 * p + k) for k in range(3)) + "."


def test_a_fit_of_exact_power_law_counts_finds_its_constant_and_exponent() -> None:
    a, beta = power_fit([1000, 4000, 16000], [3 * 1000 ** 0.5, 3 * 4000 ** 0.5, 3 * 16000 ** 0.5])
    assert a == pytest.approx(3.0) and beta == pytest.approx(0.5)


def test_concepts_are_counted_over_real_prefixes_and_projected(tmp_path: Path) -> None:
    data = tmp_path / "data"
    musique = [{"id": f"m{p}", "title": "", "text": passage(p)} for p in range(20)]
    # HotpotQA repeats one MuSiQue text: it is counted once
    hotpot = [{"id": f"h{p}", "title": "", "text": passage(p)} for p in range(20, 32)]
    hotpot.append({"id": "h-again", "title": "", "text": passage(3)})
    write_dev_set(data / "musique", musique, [])
    write_dev_set(data / "hotpotqa", hotpot, [])
    assert sorted(real_passages(data)) == sorted(passage(p) for p in range(32))
    out = tmp_path / "vocabulary.json"
    main(["--data", str(data), "--sizes", "4", "8", "16", "--synthetic", "40",
          "--fit-from", "8", "--no-timing", "--out", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    # three unseen words a passage: concepts and terms are three times the passages
    assert report["real"] == [{"passages": n, "concepts": 3 * n, "terms": 3 * n}
                              for n in (4, 8, 16, 32)]
    assert report["fit"]["beta"] == pytest.approx(1.0, abs=1e-4)
    assert report["fit"]["a"] == pytest.approx(3.0, abs=1e-3)
    assert report["fit"]["beta_between_the_two_largest"] == pytest.approx(1.0, abs=1e-4)
    assert [p["concepts_fit"] for p in report["projections"]] == [3_000_000, 300_000_000]
    assert report["projections"][0]["concept_vectors_gb_fit"] == round(3e6 * 384 * 4 / 1e9, 2)
    # the synthetic corpora recombine the sentences of every dev set, as the scale run does
    pool = sentence_pool(data)
    assert [r["passages"] for r in report["synthetic"]] == [4, 8, 16, 32, 40]
    assert report["synthetic"][-1] == counted(passages(pool, 40, 0)[1])
    assert "product_ms" not in report


def test_too_few_prefixes_for_the_fit_is_an_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dev_set(data / "musique", [{"id": f"m{p}", "title": "", "text": passage(p)}
                                     for p in range(6)], [])
    write_dev_set(data / "hotpotqa", [{"id": "h", "title": "", "text": passage(6)}], [])
    with pytest.raises(SystemExit, match="two real prefixes of at least 2000"):
        main(["--data", str(data), "--sizes", "4", "--synthetic", "--no-timing"])
