"""The weighted context ensemble: voting first, λ shares, total budget, dedup."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.fusion import (
    ContextItem,
    FusedContext,
    KGFact,
    fuse_contexts,
    kg_context_items,
    merge_by_chunk,
)
from shared_core.text import count_tokens


def item(chunk_id: str, tokens: int, text: str | None = None) -> ContextItem:
    return ContextItem(chunk_id, text or f"text of {chunk_id}", tokens)


def summary(fused: FusedContext) -> list[tuple[str, str, int | None, int | None]]:
    return [(f.item.chunk_id, f.path, f.concept_rank, f.kg_rank) for f in fused.items]


CONCEPT = [item("A", 30), item("B", 20), item("C", 25), item("D", 5)]
KG = [item("E", 30), item("B", 5, "fact from B"), item("F", 15), item("G", 40)]


def test_voted_first_then_strict_shares() -> None:
    fused = fuse_contexts(CONCEPT, KG, budget=100, lam=0.6)
    # voted: B (concept rank 1, KG rank 1), the chunk's text from the concept path, 20 tokens
    # remaining 100-20 = 80: concept cap int(.4·80) = 32, KG cap int(.6·80) = 48
    # concept: A 30 fits (30); C 25 -> 55 > 32 no; D 5 -> 35 > 32 no
    # KG: E 30 (30); F 15 -> 45 <= 48; G 40 -> 85 no
    assert summary(fused) == [
        ("B", "both", 1, 1), ("A", "concept", 0, None), ("E", "kg", None, 0),
        ("F", "kg", None, 2),
    ]
    assert fused.items[0].item.text == "text of B"
    assert fused.tokens == 95
    assert fused.tokens_by_path() == {"both": 20, "concept": 30, "kg": 45}
    assert fused.budget == 100 and fused.lam == 0.6


def test_share_unused_lets_a_path_use_the_others_slack() -> None:
    fused = fuse_contexts(CONCEPT, KG, budget=100, lam=0.6, share_unused=True)
    # after the strict pass: concept 30, KG 45; concept may now use 80-45 = 35:
    # C 25 -> 55 no; D 5 -> 35 yes. KG may use 80-35 = 45: G 40 -> 85 no
    assert summary(fused)[-1] == ("D", "concept", 3, None)
    assert fused.tokens_by_path() == {"both": 20, "concept": 35, "kg": 45}


def test_share_unused_with_an_empty_kg_path() -> None:
    concept = [item("A", 30), item("C", 25), item("D", 5)]
    strict = fuse_contexts(concept, [], budget=100, lam=0.6)
    # cap int(.4·100) = 40: A 30, C 25 -> 55 no, D 5 -> 35
    assert [f.item.chunk_id for f in strict.items] == ["A", "D"]
    shared = fuse_contexts(concept, [], budget=100, lam=0.6, share_unused=True)
    # then up to 100 - 0: C 25 -> 60
    assert [f.item.chunk_id for f in shared.items] == ["A", "D", "C"]
    assert shared.tokens == 60


@pytest.mark.parametrize(
    ("lam", "expected"),
    [
        (0.0, ["A", "B", "C"]),   # concept cap 100: 30+20+25 = 75; KG cap int(0·100) = 0
        (1.0, ["E", "F", "G"]),   # concept cap 0; KG cap 100: 30+15+40 = 85
    ],
)
def test_extreme_lambdas(lam: float, expected: list[str]) -> None:
    concept = [item("A", 30), item("B", 20), item("C", 25)]
    kg = [item("E", 30), item("F", 15), item("G", 40)]
    fused = fuse_contexts(concept, kg, budget=100, lam=lam)
    assert [f.item.chunk_id for f in fused.items] == expected


def test_voted_order_min_rank_then_rank_sum_then_id() -> None:
    concept = [item("X", 1), item("Y", 1), item("Z", 1)]
    kg = [item("Z", 1), item("Y", 1), item("X", 1)]
    # ranks (concept, KG): X (0, 2), Y (1, 1), Z (2, 0)
    # min rank: X 0, Z 0, Y 1; X and Z tie on sum (2) too -> id order X, Z
    fused = fuse_contexts(concept, kg, budget=10, lam=0.5)
    assert summary(fused) == [("X", "both", 0, 2), ("Z", "both", 2, 0), ("Y", "both", 1, 1)]


def test_voted_item_too_large_is_skipped_not_blocking() -> None:
    concept = [item("BIG", 90), item("SMALL", 10)]
    kg = [item("BIG", 3), item("SMALL", 3)]
    fused = fuse_contexts(concept, kg, budget=50, lam=0.5)
    # BIG's chunk (90) cannot be placed as a vote; SMALL (10) still is. What remains (40)
    # splits 20/20: the concept path's BIG (90) does not fit, but the KG path's own,
    # smaller item for BIG (3 tokens) does, on the KG share
    assert summary(fused) == [("SMALL", "both", 1, 1), ("BIG", "kg", None, 0)]
    assert fused.tokens == 13


def test_dedup_by_chunk_id_keeps_first_occurrence() -> None:
    concept = [item("A", 10), item("A", 99), item("B", 10)]
    kg = [item("K", 5, "fact 1 from K"), item("K", 5, "fact 2 from K"), item("L", 5)]
    fused = fuse_contexts(concept, kg, budget=100, lam=0.5)
    ids = [f.item.chunk_id for f in fused.items]
    assert ids == ["A", "B", "K", "L"]
    assert fused.items[0].item.tokens == 10 and fused.items[2].item.text == "fact 1 from K"
    # KG rank of L is its position in the original list (2), not in the deduplicated one
    assert summary(fused)[3] == ("L", "kg", None, 2)


def test_shares_are_of_the_remaining_budget_after_votes() -> None:
    concept = [item("V", 40), item("A", 20), item("B", 13)]
    kg = [item("V", 2), item("K", 35), item("L", 36)]
    fused = fuse_contexts(concept, kg, budget=100, lam=0.6)
    # V voted (40): remaining 60 -> concept cap int(.4·60) = 24, KG cap int(.6·60) = 36
    # concept: A 20 fits, B 13 -> 33 no. KG: K 35 fits, L 36 -> 71 no. Total 95
    assert [f.item.chunk_id for f in fused.items] == ["V", "A", "K"]
    assert fused.tokens == 95


@pytest.mark.parametrize("budget", [0, -5, 2.5, "100", None])
def test_bad_budget(budget: object) -> None:
    with pytest.raises(ValueError, match="budget"):
        fuse_contexts(CONCEPT, KG, budget=budget, lam=0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan")])
def test_bad_lam(lam: float) -> None:
    with pytest.raises(ValueError, match="lam"):
        fuse_contexts(CONCEPT, KG, budget=100, lam=lam)


def test_bad_context_items() -> None:
    with pytest.raises(ValueError, match="chunk_id"):
        ContextItem("", "t", 1)
    with pytest.raises(ValueError, match="chunk_id"):
        ContextItem(3, "t", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens"):
        ContextItem("a", "t", -1)
    with pytest.raises(ValueError, match="tokens"):
        ContextItem("a", "t", 1.5)  # type: ignore[arg-type]


_items = st.lists(
    st.tuples(st.sampled_from("ABCDEFGHIJ"), st.integers(0, 40)), max_size=10
).map(lambda xs: [item(c, t) for c, t in xs])


@settings(max_examples=120, deadline=None)
@given(concept=_items, kg=_items, budget=st.integers(1, 150),
       lam=st.floats(0.0, 1.0), share=st.booleans())
def test_fusion_limits_hold(concept: list[ContextItem], kg: list[ContextItem], budget: int,
                            lam: float, share: bool) -> None:
    fused = fuse_contexts(concept, kg, budget=budget, lam=lam, share_unused=share)
    ids = [f.item.chunk_id for f in fused.items]
    assert len(ids) == len(set(ids))                    # dedup by chunk id
    assert fused.tokens <= budget                        # principle 1
    paths = [f.path for f in fused.items]
    n_both = paths.count("both")
    assert paths[:n_both] == ["both"] * n_both           # principle 2: votes first
    both_ids = {c.chunk_id for c in concept} & {k.chunk_id for k in kg}
    assert all(f.item.chunk_id in both_ids for f in fused.items if f.path == "both")
    by = fused.tokens_by_path()
    first_concept = {}
    for c in concept:
        first_concept.setdefault(c.chunk_id, c)
    for f in fused.items:
        if f.path != "both" and f.item.chunk_id in both_ids:
            # a found-by-both chunk goes on a single path only when its chunk did not fit
            assert first_concept[f.item.chunk_id].tokens > budget - by["both"]
    remaining = budget - by["both"]
    if not share:                                        # principle 3, on what votes left
        assert by["concept"] <= (1 - lam) * remaining + 1e-9
        assert by["kg"] <= lam * remaining + 1e-9


def test_a_unit_is_voted_when_the_kg_path_cites_its_chunk() -> None:
    from shared_core.fusion import ContextItem, fuse_contexts

    units = [ContextItem("c1#u0", "unit zero", 10, source_id="c1"),
             ContextItem("c2#u0", "other unit", 10, source_id="c2"),
             ContextItem("c1#u3", "unit three", 10, source_id="c1")]
    facts = [ContextItem("c9", "fact from c9", 10), ContextItem("c1", "fact from c1", 10)]
    fused = fuse_contexts(units, facts, budget=100, lam=0.5)
    # both units of c1 are voted (KG rank 1 cites c1): c1#u0 (ranks 0,1) before c1#u3 (2,1);
    # remaining 80 -> 40 per path: c2#u0 from the concept path, then both facts (the
    # fact from c1 is a different text, not a copy of either unit)
    assert [(f.item.chunk_id, f.path) for f in fused.items] == [
        ("c1#u0", "both"), ("c1#u3", "both"), ("c2#u0", "concept"), ("c9", "kg"), ("c1", "kg")]
    assert [(f.concept_rank, f.kg_rank) for f in fused.items[:2]] == [(0, 1), (2, 1)]


def test_kg_facts_become_one_item_per_source_chunk_in_kg_order() -> None:
    facts = [KGFact("a -> r -> b", "c1", 0.5, {"rel": "r"}), KGFact("x -> r -> y", "c2", 0.9),
             KGFact("   ", "c3", 1.0),  # blank: carries no context, skipped
             KGFact("a -> s -> c", "c1", 0.8), KGFact("a -> r -> b", "c1", 0.1)]
    items = kg_context_items(iter(facts))
    # c1's three facts (two distinct texts) merge at c1's first rank, with the best score
    # and the first fact's metadata; tokens are recounted for the joined text
    assert [(i.chunk_id, i.text, i.score, i.metadata) for i in items] == [
        ("c1", "a -> r -> b\na -> s -> c", 0.8, {"rel": "r"}), ("c2", "x -> r -> y", 0.9, {})]
    assert [i.tokens for i in items] == [count_tokens("a -> r -> b\na -> s -> c"),
                                         count_tokens("x -> r -> y")]
    assert kg_context_items([]) == []
    assert merge_by_chunk([ContextItem("c1", "t", 1)]) == [ContextItem("c1", "t", 1)]


def test_merged_facts_reach_the_fused_context() -> None:
    kg = kg_context_items([KGFact("fact one", "K", 0.2), KGFact("fact L", "L", 0.9),
                           KGFact("fact two", "K", 0.7)])
    fused = fuse_contexts([item("A", 10)], kg, budget=100, lam=0.5)
    assert [(f.item.chunk_id, f.item.text, f.path) for f in fused.items] == [
        ("A", "text of A", "concept"), ("K", "fact one\nfact two", "kg"), ("L", "fact L", "kg")]


def test_bad_kg_facts() -> None:
    with pytest.raises(TypeError, match="text must be str, got int"):
        KGFact(3, "c1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source_chunk_id must be a non-empty str, got ''"):
        KGFact("fact", "")
    with pytest.raises(TypeError, match="score must be a number, got 'high'"):
        KGFact("fact", "c1", "high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata must be a mapping, got list"):
        KGFact("fact", "c1", 0.0, [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"facts\[1\] must be a KGFact, got tuple"):
        kg_context_items([KGFact("fact", "c1"), ("fact", "c2")])  # type: ignore[list-item]
