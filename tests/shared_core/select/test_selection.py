"""Core-chunk selection: how many chunks kappa keeps, chunk scores, tie order, cost report."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.llm import ModelPrice
from shared_core.select import (
    CostReport,
    chunk_scores,
    id_random_scores,
    n_core_by_tokens,
    n_core_chunks,
    random_scores,
    rank_by_score,
    select_by_scores,
)


@pytest.mark.parametrize(
    ("n", "kappa", "expected"),
    [
        (10, 0.2, 2), (10, 0.5, 5), (10, 0.8, 8), (10, 1.0, 10),  # ceil(kappa·10)
        (7, 0.7, 5),      # 0.7·7 is 4.8999999999999995 in floats: ceil -> 5, not 6
        (10, 0.3, 3),     # 0.3·10 = 3.0000000000000004: must not round up to 4
        (100, 0.07, 7),   # 0.07·100 = 7.000000000000001
        (3, 0.5, 2),      # 1.5 -> 2
        (10, 0.01, 1),    # 0.1 -> 1: never zero while there are chunks
        (1, 0.2, 1),
        (0, 0.5, 0),      # nothing to keep
    ],
)
def test_n_core_chunks(n: int, kappa: float, expected: int) -> None:
    assert n_core_chunks(n, kappa) == expected


def test_n_core_chunks_matches_exact_integer_ceiling_for_two_decimal_kappas() -> None:
    # kappa = p/100 typed as a decimal; exact answer ceil(p·n/100) in integer arithmetic
    for p in range(1, 101):
        kappa = float(f"0.{p:02d}") if p < 100 else 1.0
        for n in range(1, 400):
            assert n_core_chunks(n, kappa) == max(1, -(-p * n // 100)), (n, kappa)


@pytest.mark.parametrize("kappa", [0.0, -0.1, 1.01, float("nan")])
def test_n_core_chunks_rejects_bad_kappa(kappa: float) -> None:
    with pytest.raises(ValueError, match="kappa"):
        n_core_chunks(10, kappa)


# chunk x concept links; concept PageRank [.5, .3, .2]
#   chunk0: concepts 0, 1    chunk1: concept 2    chunk2: none    chunk3: 0, 1, 2 (weight 2)
LINKS = sp.csr_matrix(np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0], [2, 2, 2]], dtype=np.float32))
RANK = np.array([0.5, 0.3, 0.2])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("sum", [0.8, 0.2, 0.0, 1.0]),   # .5+.3 ; .2 ; - ; .5+.3+.2 (weights count once)
        ("max", [0.5, 0.2, 0.0, 0.5]),
        ("mean", [0.4, 0.2, 0.0, 1 / 3]),  # .8/2 ; .2/1 ; no concept -> 0 ; 1/3
    ],
)
def test_chunk_scores(mode: str, expected: list[float]) -> None:
    np.testing.assert_allclose(chunk_scores(LINKS, RANK, mode), expected)  # type: ignore[arg-type]


def test_chunk_scores_unknown_mode() -> None:
    with pytest.raises(ValueError, match="chunk_score"):
        chunk_scores(LINKS, RANK, "median")  # type: ignore[arg-type]


def test_rank_by_score_ties_keep_corpus_order() -> None:
    # 3 (pos 1, 2 tie -> 1 first), 2 (pos 3), 1 (pos 0, 4 tie -> 0 first)
    assert rank_by_score(np.array([1.0, 3.0, 3.0, 2.0, 1.0])).tolist() == [1, 2, 3, 0, 4]
    assert rank_by_score(np.zeros(4)).tolist() == [0, 1, 2, 3]


def test_select_by_scores_and_cost_report() -> None:
    ids = ["a", "b", "c", "d", "e"]
    scores = np.array([1.0, 3.0, 3.0, 2.0, 1.0])
    tokens = np.array([10, 20, 30, 40, 50])
    sel = select_by_scores(ids, scores, tokens, 0.5, prompt_tokens_per_chunk=100)
    # ceil(.5·5) = 3 kept: the ranking is b, c, d, a, e
    assert sel.ranked_ids == ("b", "c", "d", "a", "e")
    assert sel.kept_ids == ("b", "c", "d")  # corpus order
    assert sel.dropped_ids == ("a", "e")
    assert sel.scores == {"a": 1.0, "b": 3.0, "c": 3.0, "d": 2.0, "e": 1.0}
    r = sel.report
    assert (r.chunks_total, r.chunks_kept, r.chunks_dropped) == (5, 3, 2)
    assert (r.tokens_total, r.tokens_kept, r.tokens_dropped) == (150, 90, 60)  # 20+30+40
    assert r.extraction_input_tokens == 390       # 90 + 3·100
    assert r.extraction_input_tokens_all == 650   # 150 + 5·100
    assert r.cost_reduction == pytest.approx(0.4)  # 1 - 390/650
    d = r.to_dict()
    assert d["extraction_input_tokens"] == 390 and d["tokens_dropped"] == 60
    assert d["cost_reduction"] == pytest.approx(0.4) and d["kappa"] == 0.5
    s = r.summary()
    assert "3/5 chunks" in s and "90/150 tokens" in s and "40.0% saved" in s


@pytest.mark.parametrize(
    ("tokens", "kappa", "expected"),
    [
        ([5, 3, 2], 0.5, 1),   # budget 5 of 10: cumulative 5, 8, 10 -> the first only
        ([5, 3, 2], 0.8, 2),   # budget 8 holds 5 + 3 exactly
        ([5, 3, 2], 0.79, 1),  # budget 7.9: the second chunk would reach 8
        ([5, 3, 2], 1.0, 3),
        ([5, 3, 2], 0.1, 1),   # budget 1 holds nothing: still one chunk
        ([1, 1, 1], 0.3, 1),   # 0.3·3 = 0.8999999999999999: float error must not drop a chunk
        ([1] * 10, 0.3, 3),    # 0.3·10 = 3.0000000000000004
        ([], 0.5, 0),
    ],
)
def test_n_core_by_tokens(tokens: list[int], kappa: float, expected: int) -> None:
    assert n_core_by_tokens(np.array(tokens, dtype=np.int64), kappa) == expected


def test_n_core_by_tokens_rejects_bad_kappa() -> None:
    with pytest.raises(ValueError, match="kappa"):
        n_core_by_tokens(np.array([1, 2]), 1.5)


def test_select_by_tokens_keeps_the_ranked_prefix_within_the_token_share() -> None:
    ids = ["a", "b", "c", "d"]
    scores = np.array([4.0, 3.0, 2.0, 1.0])
    tokens = np.array([10, 40, 20, 30])
    by_tokens = select_by_scores(ids, scores, tokens, 0.5, by="tokens")
    # budget 50 of 100 tokens; ranked a, b, c, d with cumulative 10, 50, 70, 100
    assert by_tokens.kept_ids == ("a", "b")
    assert (by_tokens.report.tokens_kept, by_tokens.report.by) == (50, "tokens")
    assert by_tokens.report.cost_reduction == pytest.approx(0.5)
    assert "kappa=0.5 of tokens" in by_tokens.report.summary()
    # the same kappa over chunks keeps ceil(.5·4) = 2 chunks too, but 0.6 differs:
    # 3 chunks (70 tokens) by chunks, still 2 (60 would need c's 20 after 50) by tokens
    assert select_by_scores(ids, scores, tokens, 0.6).kept_ids == ("a", "b", "c")
    assert select_by_scores(ids, scores, tokens, 0.6, by="tokens").kept_ids == ("a", "b")
    with pytest.raises(ValueError, match="by must be"):
        select_by_scores(ids, scores, tokens, 0.5, by="words")  # type: ignore[arg-type]


def test_cost_report_without_prompt_and_empty() -> None:
    r = CostReport(kappa=0.2, chunks_total=10, chunks_kept=2, tokens_total=1000,
                   tokens_kept=300)
    assert r.extraction_input_tokens == 300
    assert r.cost_reduction == pytest.approx(0.7)  # 1 - 300/1000
    assert CostReport(0.5, 0, 0, 0, 0).cost_reduction == 0.0  # no division by zero


def test_cost_report_prices_the_extraction_before_any_call() -> None:
    # 2 of 10 chunks, 300 of 1000 tokens, a 100-token prompt per chunk:
    # core input 300 + 2*100 = 500, all 1000 + 10*100 = 2000; output ratio 0.5
    r = CostReport(kappa=0.2, chunks_total=10, chunks_kept=2, tokens_total=1000,
                   tokens_kept=300, prompt_tokens_per_chunk=100)
    core = r.extraction_estimate("gpt-4o-mini-2024-07-18", output_ratio=0.5)
    assert (core.calls, core.input_tokens, core.output_tokens) == (2, 500, 250)
    # gpt-4o-mini list price $0.15 in / $0.60 out per 1M tokens
    assert core.usd == pytest.approx((500 * 0.15 + 250 * 0.60) / 1e6)
    full = r.extraction_estimate("mine", all_chunks=True, output_ratio=0.5,
                                 prices={"mine": ModelPrice(1.0, 2.0)})
    assert (full.calls, full.input_tokens, full.output_tokens) == (10, 2000, 1000)
    assert full.usd == pytest.approx((2000 * 1.0 + 1000 * 2.0) / 1e6)
    assert r.extraction_estimate("unknown-model").usd is None  # no price, no made-up figure


def test_select_all_ties_is_deterministic() -> None:
    sel = select_by_scores(["x", "y", "z", "w"], np.zeros(4), np.ones(4, dtype=np.int64), 0.5)
    assert sel.kept_ids == ("x", "y")  # ties -> corpus order


def test_select_by_scores_bad_arguments() -> None:
    with pytest.raises(ValueError, match="same length"):
        select_by_scores(["a"], np.zeros(2), np.zeros(2), 0.5)
    with pytest.raises(ValueError, match="prompt_tokens_per_chunk"):
        select_by_scores(["a"], np.zeros(1), np.zeros(1), 0.5, prompt_tokens_per_chunk=-1)
    with pytest.raises(ValueError, match="kappa"):
        select_by_scores(["a"], np.zeros(1), np.zeros(1), 0.0)


def test_random_scores_deterministic_per_seed() -> None:
    a, b, c = random_scores(50, seed=3), random_scores(50, seed=3), random_scores(50, seed=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert ((a >= 0) & (a < 1)).all() and a.shape == (50,)


def test_index_select_methods_knn_and_random() -> None:
    import numpy as np

    from shared_core import ConceptGraphIndex, HashingEmbedder
    from shared_core.select import knn_chunk_graph
    from shared_core.text import count_terms, split_sentences, term_analyzer

    texts = ["Ada Lovelace wrote notes on the engine.", "Babbage designed the engine.",
             "The engine computed Bernoulli numbers.", "Lovelace published her notes.",
             "Gears and levers moved the mill."]
    embedder = HashingEmbedder()
    index = ConceptGraphIndex.from_texts(texts, ids=list("abcde"), embedder=embedder)

    # KET-RAG's graph over the same inputs built independently: chunk term counts
    # and each chunk's mean sentence vector
    terms = count_terms(texts, {}, term_analyzer())
    sums = np.stack([embedder.embed([t[s:e] for s, e in split_sentences(t)]).sum(axis=0)
                     for t in texts])
    vectors = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    expected = knn_chunk_graph(terms, vectors, 2).scores
    knn = index.select(0.4, method="knn", by="chunks")
    np.testing.assert_allclose([knn.scores[i] for i in "abcde"], expected, atol=1e-12)
    assert knn.report.chunks_kept == 2  # ceil(0.4 * 5)
    per_token = index.select(0.4, method="knn")  # by tokens: PageRank per token
    tokens = np.array([index.get(i).tokens for i in "abcde"])
    np.testing.assert_allclose([per_token.scores[i] for i in "abcde"], expected / tokens,
                               atol=1e-12)

    first, again = index.select(0.6, method="random", seed=3, by="chunks"), index.select(
        0.6, method="random", seed=3, by="chunks")
    assert first.kept_ids == again.kept_ids and len(first.kept_ids) == 3  # ceil(0.6 * 5)
    assert any(index.select(0.6, method="random", seed=s, by="chunks").kept_ids
               != first.kept_ids for s in range(4, 10))
    with pytest.raises(ValueError, match="method"):
        index.select(0.5, method="degree")  # type: ignore[arg-type]


def test_index_select_by_tokens_ranks_by_score_per_token() -> None:
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder

    texts = ["Ada Lovelace wrote notes on the engine. The engine computed numbers. "
             "Babbage built the engine and Lovelace described the engine at length.",
             "Babbage designed the engine.", "Lovelace published her notes.",
             "Gears and levers moved the mill."]
    index = ConceptGraphIndex.from_texts(texts, ids=list("abcd"), embedder=HashingEmbedder())
    value = index.chunk_scores()
    tokens = {i: index.get(i).tokens for i in "abcd"}
    density = {i: value[i] / tokens[i] for i in "abcd"}
    # the long chunk carries the most concept PageRank but not the most per token
    assert max(value, key=value.__getitem__) == "a"
    assert max(density, key=density.__getitem__) != "a"
    selection = index.select(0.5, by="tokens")
    ranked = sorted("abcd", key=lambda i: (-density[i], i))
    assert list(selection.ranked_ids) == ranked
    assert selection.scores == pytest.approx(density)
    budget, kept, used = 0.5 * sum(tokens.values()), [], 0
    for i in ranked:
        if used + tokens[i] > budget:
            break
        kept.append(i)
        used += tokens[i]
    assert set(selection.kept_ids) == set(kept) and selection.report.tokens_kept == used
    # by="tokens" from the config; random stays a uniform order (no division by length)
    by_config = ConceptGraphIndex.from_texts(texts, ids=list("abcd"), embedder=HashingEmbedder(),
                                             config=ConceptGraphConfig(select_by="tokens"))
    assert by_config.select(0.5).kept_ids == selection.kept_ids
    random = index.select(0.5, method="random", seed=1, by="tokens")
    assert list(random.ranked_ids) == sorted("abcd", key=lambda i: -random.scores[i])
    # each chunk's draw comes from its id and the seed, not its position
    assert random.scores == pytest.approx(
        dict(zip("abcd", id_random_scores(list("abcd"), 1), strict=True)))
    with pytest.raises(ValueError, match="select_by"):
        index.select(0.5, by="words")  # type: ignore[arg-type]
