"""Retrieval over sentence units finer than the selection chunk (config.unit_tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.text import count_tokens
from tests.shared_core.fakes import STORED_COSINE_TOL

CHUNKS = {
    "a": "Lovelace wrote notes. Babbage built engines. Lovelace studied mathematics.",
    "b": "Babbage designed gears. Gears turn slowly.",
}
SENTENCES = {
    "a": ["Lovelace wrote notes.", "Babbage built engines.", "Lovelace studied mathematics."],
    "b": ["Babbage designed gears.", "Gears turn slowly."],
}
# every sentence alone: two sentences plus the joining space exceed the largest sentence
ONE_SENTENCE_UNITS = max(count_tokens(s) for group in SENTENCES.values() for s in group)


def build(unit_tokens: int, **config: object) -> ConceptGraphIndex:
    # the paper's ranking: a unit comes in through the concept it contains
    config = {"ranking": "paper", **config}
    cfg = ConceptGraphConfig(unit_tokens=unit_tokens, concepts_per_chunk=50, **config)  # type: ignore[arg-type]
    return ConceptGraphIndex.from_texts(list(CHUNKS.values()), ids=list(CHUNKS),
                                        metadatas=[{"doc": k} for k in CHUNKS],
                                        embedder=HashingEmbedder(), config=cfg)


def test_units_are_sentences_tagged_with_their_chunk() -> None:
    index = build(ONE_SENTENCE_UNITS)
    result = index.retrieve("Babbage gears", budget=10_000, top_k=50, hops=0)
    got = {hit.id: hit for hit in result.chunks}
    # every concept's units are reachable with top_k=50, so all five sentences come back
    expected = {f"{cid}#u{k}": text for cid, group in SENTENCES.items()
                for k, text in enumerate(group)}
    assert {uid: hit.text for uid, hit in got.items()} == expected
    for uid, hit in got.items():
        parent = uid.split("#")[0]
        assert hit.chunk.metadata["parent_chunk_id"] == parent
        assert hit.chunk.metadata["doc"] == parent  # the chunk's own metadata is carried
        assert hit.chunk.tokens == count_tokens(hit.text)


def test_a_concept_brings_only_the_units_that_contain_it() -> None:
    index = build(ONE_SENTENCE_UNITS)
    result = index.retrieve("Lovelace", top_k=1, hops=0, budget=10_000)
    # 'lovelace' is the best concept: its vector averages the two sentences naming it,
    # so cos = 2/sqrt(8) ~ 0.71 beats every one-sentence concept's 1/sqrt(3) ~ 0.58
    assert result.direct_concepts == ("lovelace",)
    # only the two sentences containing the term, not "Babbage built engines." of chunk a
    assert sorted(hit.id for hit in result.chunks) == ["a#u0", "a#u2"]
    assert all(hit.provenance.concept == "lovelace" for hit in result.chunks)

    whole = build(0).retrieve("Lovelace", top_k=1, hops=0, budget=10_000)
    assert [hit.id for hit in whole.chunks] == ["a"]  # chunk mode returns the whole chunk


def test_units_pack_several_sentences_when_they_fit() -> None:
    sizes = [count_tokens(s) for s in SENTENCES["a"]]
    # room for the first two sentences and their joining space, not for the third
    room = sizes[0] + 1 + sizes[1]
    assert room + 1 + sizes[2] > room
    index = build(room)
    texts = {hit.id: hit.text for hit in
             index.retrieve("Lovelace Babbage", top_k=50, hops=0, budget=10_000).chunks
             if hit.id.startswith("a#")}
    assert texts == {"a#u0": "Lovelace wrote notes. Babbage built engines.",
                     "a#u1": "Lovelace studied mathematics."}


def test_budget_counts_unit_tokens() -> None:
    index = build(ONE_SENTENCE_UNITS)
    first = index.retrieve("Lovelace", top_k=1, hops=0, budget=10_000).chunks[0]
    tight = index.retrieve("Lovelace", top_k=1, hops=0, budget=first.chunk.tokens)
    assert [hit.id for hit in tight.chunks] == [first.id]
    assert sum(count_tokens(hit.text) for hit in tight.chunks) <= first.chunk.tokens


def test_selection_is_still_over_whole_chunks() -> None:
    units, whole = build(ONE_SENTENCE_UNITS), build(0)
    assert units.select(0.5).kept_ids == whole.select(0.5).kept_ids
    assert units.select(1.0).report.tokens_total == whole.select(1.0).report.tokens_total


def test_round_trip_delete_and_idempotent_add(tmp_path: Path) -> None:
    index = build(ONE_SENTENCE_UNITS)
    before = index.retrieve("Babbage gears", top_k=50, budget=10_000)
    index.save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder())
    assert loaded.retrieve("Babbage gears", top_k=50, budget=10_000).chunks == before.chunks

    loaded.add(list(CHUNKS.values()), ids=list(CHUNKS))  # known chunks: nothing changes
    assert loaded.retrieve("Babbage gears", top_k=50, budget=10_000).chunks == before.chunks

    loaded.delete(["a"])
    after = loaded.retrieve("Babbage gears", top_k=50, budget=10_000)
    assert sorted(hit.id for hit in after.chunks) == ["b#u0", "b#u1"]


def test_direct_similarity_embeds_the_units_not_the_chunks(tmp_path: Path) -> None:
    room = count_tokens(SENTENCES["a"][0]) + 1 + count_tokens(SENTENCES["a"][1])
    index = build(room, chunk_similarity="direct")
    embed = HashingEmbedder().embed
    hits = index.retrieve("Lovelace Babbage", top_k=50, hops=0, budget=10_000).chunks
    texts = {hit.id: hit.text for hit in hits}
    assert texts["a#u0"] == "Lovelace wrote notes. Babbage built engines."
    q = embed(["Lovelace Babbage"])[0]
    for hit in hits:  # paper ranking: the score is cos(query, the unit's own text)
        assert hit.score == pytest.approx(float(embed([hit.text])[0] @ q), abs=STORED_COSINE_TOL)
    index.save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder())
    loaded.delete(["a"])  # b's unit vectors stay aligned with b's units
    for hit in loaded.retrieve("Babbage gears", top_k=50, budget=10_000).chunks:
        assert hit.id.startswith("b#")
        assert hit.score == pytest.approx(float(embed([hit.text])[0] @ embed(["Babbage gears"])[0]),
                                          abs=STORED_COSINE_TOL)


def test_unit_tokens_must_be_a_non_negative_int() -> None:
    with pytest.raises(ValueError, match="unit_tokens"):
        ConceptGraphConfig(unit_tokens=-5)


def test_exact_match_seeds_lead_rarest_first() -> None:
    index = build(0, exact_match_seeds=True)
    # every term is a concept (50 per chunk); 'babbage' links chunks a and b, 'engines'
    # only a, so the rarer 'engines' leads, then 'babbage', then the most similar others
    result = index.retrieve("babbage engines", top_k=3, hops=0, budget=10_000)
    assert result.direct_concepts[:2] == ("engines", "babbage")
    assert len(result.direct_concepts) == 3
    assert build(0, exact_match_seeds=True).retrieve(
        "babbage engines", top_k=1, hops=0).direct_concepts == ("engines",)
    # a query term that is no concept seeds nothing: order is by similarity alone
    unknown = build(0, exact_match_seeds=True).retrieve("zeppelins", top_k=2, hops=0)
    plain = build(0).retrieve("zeppelins", top_k=2, hops=0)
    assert unknown.direct_concepts == plain.direct_concepts
