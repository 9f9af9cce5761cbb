"""Saved token counts: read on load, confirmed against the texts as retrieval returns them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shared_core.store as store
from benchmarks.faults import rehash
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.store import CorruptIndexError, index_folder
from shared_core.text.tokens import count_tokens
from tests.shared_core.test_store import TEXTS

DIM = 64
IDS = [f"t{i}" for i in range(len(TEXTS))]
QUERY = "Who wrote the first compiler?"
CONFIGS = {"chunks": {}, "units": {"unit_tokens": 12}}


def build(**knobs: object) -> ConceptGraphIndex:
    config = ConceptGraphConfig(theta_co=1, theta_sem=0.0, **knobs)  # type: ignore[arg-type]
    return ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(DIM),
                                        config=config)


def load(path: Path, *, verify: bool = False) -> ConceptGraphIndex:
    return ConceptGraphIndex.load(str(path), HashingEmbedder(DIM), verify=verify)


def retrieved(index: ConceptGraphIndex, budget: int = 40) -> list[tuple[str, float, int]]:
    return [(c.id, c.score, c.chunk.tokens) for c in index.retrieve(QUERY, budget=budget).chunks]


def counts_file(index: ConceptGraphIndex) -> str:
    return "unit_tokens.npy" if index.config.unit_tokens else "tokens.npy"


def unit_position(index: ConceptGraphIndex, unit_id: str) -> int:
    """Where a returned unit's count sits in the saved counts (``chunk#uK`` for units)."""
    chunk_id, _, k = unit_id.partition("#u")
    chunk = index.state.corpus.position[chunk_id]
    if not k:
        return chunk
    return int(np.searchsorted(index.state.graph.unit_chunk, chunk)) + int(k)


def edit_count(folder: Path, name: str, position: int, value: int) -> None:
    counts = np.load(folder / name, allow_pickle=False)
    counts[position] = value
    np.save(folder / name, counts, allow_pickle=False)
    rehash(folder, name)


@pytest.mark.parametrize("knobs", list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_load_reads_the_counts_and_each_returned_unit_is_recounted_once(
        knobs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = build(**knobs)
    original.save(str(tmp_path / "idx"))

    def no_recount(texts: object) -> None:
        raise AssertionError("a load of saved counts recounted them")

    monkeypatch.setattr(store, "count_tokens_batch", no_recount)
    loaded = load(tmp_path / "idx")
    corpus, graph = loaded.state.corpus, loaded.state.graph
    assert corpus.tokens_read
    assert corpus.tokens.tolist() == [count_tokens(t) for t in TEXTS]
    assert np.array_equal(graph.unit_tokens, original.state.graph.unit_tokens)
    pending = graph.unit_tokens_unconfirmed
    assert pending is not None and pending.all()
    assert original.state.graph.unit_tokens_unconfirmed is None  # counted here, not read
    got = retrieved(loaded)
    assert got == retrieved(original)
    # the units the query returned were recounted (by the core's counter), and only they
    assert sorted(np.flatnonzero(~pending).tolist()) == sorted(
        unit_position(loaded, unit_id) for unit_id, _, _ in got)
    assert 0 < len(got) < len(pending)


@pytest.mark.parametrize("knobs", list(CONFIGS.values()), ids=list(CONFIGS))
def test_an_edited_count_is_refused_when_a_query_would_return_its_unit(
        knobs: dict[str, object], tmp_path: Path) -> None:
    index = build(**knobs)
    index.save(str(tmp_path / "idx"))
    top = index.retrieve(QUERY, budget=40).chunks[0]
    # a smaller count would let more text into the budget: the edit a budget must survive
    edit_count(index_folder(tmp_path / "idx"), counts_file(index), unit_position(index, top.id),
               1)
    loaded = load(tmp_path / "idx")  # the rules hold: a positive count of the right shape
    with pytest.raises(CorruptIndexError, match=rf"token count of '{top.id}' is 1, but its "
                                                rf"text has {top.chunk.tokens} tokens"):
        loaded.retrieve(QUERY, budget=40)
    with pytest.raises(CorruptIndexError, match=rf"{counts_file(index)}: 1 counts differ"):
        load(tmp_path / "idx", verify=True)


def test_counts_read_from_a_save_stay_unconfirmed_through_updates(tmp_path: Path) -> None:
    index = build()
    index.save(str(tmp_path / "idx"))
    top = index.retrieve(QUERY, budget=40).chunks[0]
    edit_count(index_folder(tmp_path / "idx"), "tokens.npy", IDS.index(top.id), 2)
    loaded = load(tmp_path / "idx")
    loaded.add(["Konrad Zuse built the Z3 computer."], ids=["t9"])
    loaded.delete(["t0"] if top.id != "t0" else ["t1"])
    assert loaded.state.corpus.tokens_read
    with pytest.raises(CorruptIndexError, match=rf"token count of '{top.id}' is 2"):
        loaded.retrieve(QUERY, budget=40)
    # an index built here counts its own texts: nothing to confirm
    fresh = build()
    fresh.add(["Konrad Zuse built the Z3 computer."], ids=["t9"])
    assert not fresh.state.corpus.tokens_read
    assert fresh.state.graph.unit_tokens_unconfirmed is None


def test_a_verifying_load_recounts_and_confirms_everything(tmp_path: Path) -> None:
    build(unit_tokens=12).save(str(tmp_path / "idx"))
    loaded = load(tmp_path / "idx", verify=True)
    assert not loaded.state.corpus.tokens_read
    assert loaded.state.graph.unit_tokens_unconfirmed is None


def test_a_save_without_counts_recounts_them(tmp_path: Path) -> None:
    original = build(unit_tokens=12)
    original.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for name in ("tokens.npy", "unit_tokens.npy"):  # as saves before this change
        (folder / name).unlink()
        del manifest["files"][name]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    loaded = load(tmp_path / "idx")
    assert not loaded.state.corpus.tokens_read
    assert loaded.state.graph.unit_tokens_unconfirmed is None
    assert retrieved(loaded) == retrieved(original)


def test_a_manifest_that_lists_one_count_file_is_refused(tmp_path: Path) -> None:
    build().save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del manifest["files"]["unit_tokens.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match=r"lists one of tokens\.npy and unit_tokens\.npy"):
        load(tmp_path / "idx")


def test_a_zero_count_is_refused_on_load(tmp_path: Path) -> None:
    build().save(str(tmp_path / "idx"))
    edit_count(index_folder(tmp_path / "idx"), "tokens.npy", 0, 0)
    with pytest.raises(CorruptIndexError, match=r"tokens\.npy: token counts must be positive"):
        load(tmp_path / "idx")


def unit_ids(index: ConceptGraphIndex) -> list[str]:
    """Every unit's id in position order: ``chunk`` for whole chunks, ``chunk#uK`` else."""
    corpus, graph = index.state.corpus, index.state.graph
    if not index.config.unit_tokens:
        return list(corpus.ids)
    per_chunk = np.bincount(graph.unit_chunk, minlength=len(corpus.ids))
    return [f"{cid}#u{k}" for cid, n in zip(corpus.ids, per_chunk, strict=True)
            for k in range(n)]


def unconfirmed_ids(index: ConceptGraphIndex) -> set[str]:
    pending = index.state.graph.unit_tokens_unconfirmed
    if pending is None:
        return set()
    return {unit for unit, todo in zip(unit_ids(index), pending, strict=True) if todo}


@pytest.mark.parametrize("knobs", list(CONFIGS.values()), ids=list(CONFIGS))
def test_warm_recounts_every_saved_count_so_no_query_does(
        knobs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = build(**knobs)
    original.save(str(tmp_path / "idx"))
    loaded = load(tmp_path / "idx")
    units = len(original.state.graph.unit_tokens)
    assert units == (len(TEXTS) if not knobs else len(unit_ids(loaded)))
    assert len(unconfirmed_ids(loaded)) == units
    assert loaded.warm(batch_size=2) == units
    assert unconfirmed_ids(loaded) == set()
    assert loaded.warm() == 0
    assert original.warm() == 0  # built here: every count was counted from its text

    def no_recount(texts: object) -> None:
        raise AssertionError("a query recounted a count warm() had confirmed")

    monkeypatch.setattr("shared_core.index.count_tokens_batch", no_recount)
    assert retrieved(loaded) == retrieved(original)


def test_warm_refuses_an_edited_count_and_keeps_what_it_confirmed_before(tmp_path: Path) -> None:
    index = build()
    index.save(str(tmp_path / "idx"))
    edit_count(index_folder(tmp_path / "idx"), "tokens.npy", 2, 1)
    loaded = load(tmp_path / "idx")
    text = TEXTS[2]
    with pytest.raises(CorruptIndexError, match=rf"token count of 't2' is 1, but its text has "
                                                rf"{count_tokens(text)} tokens"):
        loaded.warm(batch_size=2)
    # batches of two: t0 and t1 were confirmed, the batch holding t2 was not
    assert unconfirmed_ids(loaded) == {"t2", "t3", "t4"}
    with pytest.raises(CorruptIndexError, match=r"token count of 't2' is 1"):
        loaded.warm()
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        loaded.warm(batch_size=0)


ADDED = ["Konrad Zuse built the Z3 computer. It used relays.",
         "Alan Turing described a universal machine. It reads a tape.",
         "John von Neumann described stored programs. Memory held the code."]


@pytest.mark.parametrize("knobs", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("added", [1, 3], ids=["refreshed", "derived-again"])
def test_an_update_keeps_the_counts_already_confirmed(
        knobs: dict[str, object], added: int, tmp_path: Path) -> None:
    """One chunk of six is refreshed; three of eight pass MAX_CHANGED_CHUNKS (a quarter),
    and the graph is derived again: both keep what was confirmed."""
    build(**knobs).save(str(tmp_path / "idx"))
    loaded = load(tmp_path / "idx")
    returned = {unit_id for unit_id, _, _ in retrieved(loaded)}
    before = set(unit_ids(loaded))
    assert returned and returned < before
    gone = next(cid for cid in IDS if not any(u.partition("#u")[0] == cid for u in returned))
    new_ids = [f"n{i}" for i in range(added)]
    loaded.add(ADDED[:added], ids=new_ids)
    loaded.delete([gone])
    assert {u.partition("#u")[0] for u in unit_ids(loaded)} == set(IDS) - {gone} | set(new_ids)
    # every unit of the old corpus that no query returned, less the deleted chunk's
    expected = {u for u in before - returned if u.partition("#u")[0] != gone}
    assert expected and unconfirmed_ids(loaded) == expected
    assert loaded.warm() == len(expected)
    loaded.add(["Charles Babbage also drew a difference engine."], ids=["t8"])
    assert loaded.state.graph.unit_tokens_unconfirmed is None


def test_a_load_reads_the_tokenizer_before_the_first_query(tmp_path: Path) -> None:
    from shared_core.text.tokens import _encoding

    build().save(str(tmp_path / "idx"))
    _encoding.cache_clear()
    load(tmp_path / "idx")
    assert _encoding.cache_info().currsize == 1
