"""One immutable index state: failed updates publish nothing, reads race writes safely,
and an index depends only on the chunks it holds (issue #11's reproductions first)."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from benchmarks.faults import FailOnCall, check_loaded, readers_and_writer
from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import EMBED_BATCH, HashingEmbedder
from shared_core.index import ConceptGraphIndex, content_id
from shared_core.state.spill import VectorSpill
from shared_core.text import count_tokens, split_sentences
from tests.shared_core.fakes import RecordingEmbedder
from tests.shared_core.test_index import CORPUS

DIM = 64
POOL = [
    *CORPUS,  # test_index's eight chunks, and two that tie several of them together
    "The loom and the engine both used cards. Cards carried the program.",
    "Hopper and Turing both worked on machines that ran programs.",
]
QUERIES = ["Who wrote the first compiler?", "analytical engine punched cards",
           "Enigma cipher machine", "loom silk"]
SMALL = dict(theta_co=1, theta_sem=0.0, top_k=3, concepts_per_chunk=3, budget=120)
# every config whose stored or derived state differs in kind
CONFIGS = {
    "default": ConceptGraphConfig(**SMALL),
    "paper": ConceptGraphConfig.paper(**SMALL),
    "units": ConceptGraphConfig(**SMALL, unit_tokens=12),
    "direct": ConceptGraphConfig(**SMALL, chunk_similarity="direct"),
    "direct_units": ConceptGraphConfig(**SMALL, chunk_similarity="direct", unit_tokens=12),
    "mean_extracted": ConceptGraphConfig(**SMALL, chunk_similarity="mean",
                                         concept_links="extracted"),
    "bigrams_exact": ConceptGraphConfig(**SMALL, ngram_max=2, exact_match_seeds=True),
    # the direct concepts proposed by an HNSW graph that updates keep and saves hold
    "concept_graph": ConceptGraphConfig(**SMALL, concept_search="hnsw"),
}


def ids_for(texts: Sequence[str]) -> list[str]:
    return [f"p{POOL.index(t):02d}" for t in texts]


def fingerprint(index: ConceptGraphIndex) -> list[Any]:
    """Everything a user can observe of an index, as plain values compared exactly."""
    out: list[Any] = [index.chunk_ids, index.concepts, index.edges, index.concept_pagerank(),
                      index.chunk_scores(), index.stats()]
    out.append([index.get(i) for i in index.chunk_ids])
    for method in ("concept", "knn", "random"):
        selection = index.select(0.5, method=method)  # type: ignore[arg-type]
        out.append((selection.kept_ids, selection.ranked_ids, selection.scores))
    for query in QUERIES:
        result = index.retrieve(query)
        out.append([(c.id, c.text, c.score, c.provenance, c.chunk.metadata, c.chunk.tokens)
                    for c in result.chunks])
        out.append((result.direct_concepts, result.expanded_concepts, result.stopped_by_budget))
    return out


PAGERANK_TOL = 1e-8  # an update warm-starts PageRank: equal to a fresh build within this


def assert_same_index(a: ConceptGraphIndex, b: ConceptGraphIndex) -> None:
    """Two indexes' fingerprints agree: every value exactly, except floats within
    ``PAGERANK_TOL`` (an update's PageRank is warm-started, a build's is not)."""
    _assert_same(fingerprint(a), fingerprint(b), "fingerprint")


def _assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, abs=PAGERANK_TOL), where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        _assert_same(dataclasses.asdict(a), dataclasses.asdict(b), where)  # type: ignore[arg-type]
    else:
        assert a == b, where


# ------------------------------------------------------------------ 1. a failed add
@pytest.mark.parametrize("name", ["default", "direct", "direct_units"])
@pytest.mark.parametrize("failing_call", [1, 2])
def test_a_failed_add_publishes_nothing(name: str, failing_call: int, tmp_path: Path) -> None:
    cfg = CONFIGS[name]
    embedder = FailOnCall(dim=DIM)
    index = ConceptGraphIndex.from_texts(POOL[:5], ids=ids_for(POOL[:5]),
                                         embedder=embedder.embedder(), config=cfg)
    before_state, before = index.state, fingerprint(index)
    # enough sentences for two embedding calls even without unit vectors
    many = [f"Filler sentence number {i} about rivers." for i in range(EMBED_BATCH + 10)]
    big = [" ".join(many), *POOL[5:]]
    embedder.calls, embedder.fail_on = 0, failing_call
    with pytest.raises(TimeoutError):
        index.add(big, ids=["big", *ids_for(POOL[5:])])
    assert embedder.calls == failing_call
    assert index.state is before_state and fingerprint(index) == before
    # the index keeps working: the next add, save and load are those of a clean index
    embedder.fail_on = 0
    index.add(POOL[5:], ids=ids_for(POOL[5:]))
    index.save(str(tmp_path / "idx"))
    # the same embedding path (a FunctionEmbedder re-normalises: last-bit differences)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), FailOnCall(dim=DIM).embedder())
    clean = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL),
                                         embedder=FailOnCall(dim=DIM).embedder(), config=cfg)
    assert_same_index(index, clean)
    assert_same_index(index, loaded)


def test_a_failed_delete_or_bad_add_changes_nothing() -> None:
    index = ConceptGraphIndex.from_texts(POOL[:4], ids=ids_for(POOL[:4]),
                                         embedder=HashingEmbedder(DIM), config=CONFIGS["default"])
    state = index.state
    with pytest.raises(KeyError, match="nope"):
        index.delete(["p00", "nope"])
    with pytest.raises(ValueError, match="already holds different text"):
        index.add([POOL[5], "changed text."], ids=["p09", "p00"])
    assert index.state is state and "p09" not in index


# ------------------------------------------------------------------ 3. readers during writes
@pytest.mark.parametrize("name", ["default", "direct_units", "concept_graph"])
def test_four_readers_and_a_writer(name: str) -> None:
    index = ConceptGraphIndex.from_texts(POOL[:6], ids=ids_for(POOL[:6]),
                                         embedder=HashingEmbedder(DIM), config=CONFIGS[name])
    race = readers_and_writer(index, POOL[6:], QUERIES, readers=4, updates=30, budget=60)
    assert race.errors == []
    assert race.updates == 30 and race.queries > 30
    assert (race.over_budget, race.unknown_ids, race.wrong_tokens) == (0, 0, 0)
    assert len(index) == 6  # 15 adds, 15 deletes


# ------------------------------------------------------------------ 5. history independence
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_delete_gives_the_index_that_never_held_the_chunks(name: str) -> None:
    cfg = CONFIGS[name]
    never = ConceptGraphIndex.from_texts(POOL[:6], ids=ids_for(POOL[:6]),
                                         embedder=HashingEmbedder(DIM), config=cfg)
    index = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM),
                                         config=cfg)
    index.delete(ids_for(POOL[6:]))
    assert_same_index(index, never)
    # delete then re-add: the index that was built at once
    index.add(POOL[6:], ids=ids_for(POOL[6:]))
    at_once = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL),
                                           embedder=HashingEmbedder(DIM), config=cfg)
    assert_same_index(index, at_once)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(CONFIGS)),
    chosen=st.lists(st.sampled_from(range(len(POOL))), min_size=2, max_size=len(POOL),
                    unique=True),
    cuts=st.lists(st.integers(1, len(POOL)), max_size=3),
    extra=st.lists(st.sampled_from(range(len(POOL))), max_size=3, unique=True),
)
def test_pieces_in_any_order_equal_building_at_once(name: str, chosen: list[int],
                                                    cuts: list[int], extra: list[int]) -> None:
    """Property: any split and order of the adds, with chunks added then deleted on the way,
    gives exactly the index built at once from the same chunks."""
    cfg = CONFIGS[name]
    texts = [POOL[i] for i in chosen]
    at_once = ConceptGraphIndex.from_texts(sorted(texts), ids=ids_for(sorted(texts)),
                                           embedder=HashingEmbedder(DIM), config=cfg)
    index = ConceptGraphIndex(HashingEmbedder(DIM), cfg)
    passers = [POOL[i] for i in extra if POOL[i] not in texts]
    bounds = sorted({0, len(texts), *(c for c in cuts if c < len(texts))})
    for a, b in itertools.pairwise(bounds):
        index.add(texts[a:b], ids=ids_for(texts[a:b]))
        if passers and a == 0:
            index.add(passers, ids=ids_for(passers))
    if passers:
        index.delete(ids_for(passers))
    assert_same_index(index, at_once)


def test_terms_are_ordered_by_content_not_first_sight() -> None:
    # "zebra" is seen first but "lions" sorts first; TF-IDF ties (both count 1, df 1)
    # go to the lower column, so the tie goes to the word first in sorted order
    cfg = ConceptGraphConfig(concepts_per_chunk=1, concept_links="extracted")
    a = ConceptGraphIndex.from_texts(["Zebra lions."], embedder=HashingEmbedder(DIM), config=cfg)
    b = ConceptGraphIndex.from_texts(["Lions zebra."], embedder=HashingEmbedder(DIM), config=cfg)
    assert a.concepts == b.concepts == ["lions"]
    assert a.state.corpus.terms == ("lions", "zebra")


# ------------------------------------------------------------------ metadata on re-add
def test_readding_with_new_metadata_updates_it_without_embedding() -> None:
    recorder = RecordingEmbedder(HashingEmbedder(DIM))
    index = ConceptGraphIndex.from_texts(POOL[:3], ids=["a", "b", "c"], embedder=recorder,
                                         metadatas=[{"v": 1}, {"v": 1}, {"v": 1}],
                                         config=CONFIGS["default"])
    embedded, graph = len(recorder.texts), index.state.graph
    index.add([POOL[1]], ids=["b"], metadatas=[{"v": 2, "new": True}])
    assert index.get("b").metadata == {"v": 2, "new": True}
    assert index.get("a").metadata == {"v": 1}
    assert len(recorder.texts) == embedded and index.state.graph is graph
    hit = next(c for c in index.retrieve("analytical engine").chunks if c.id == "b")
    assert hit.chunk.metadata == {"v": 2, "new": True}
    # without metadatas the stored metadata is kept
    index.add([POOL[1]], ids=["b"])
    assert index.get("b").metadata == {"v": 2, "new": True}


def test_one_content_id_twice_with_different_metadata_is_an_error() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM), CONFIGS["default"])
    with pytest.raises(ValueError, match=r"texts\[0\] and texts\[2\] are the same text"):
        index.add([POOL[0], POOL[1], POOL[0]], metadatas=[{"f": "a"}, {}, {"f": "b"}])
    assert len(index) == 0
    index.add([POOL[0], POOL[1], POOL[0]], metadatas=[{"f": "a"}, {}, {"f": "a"}])
    assert len(index) == 2 and index.get(content_id(POOL[0])).metadata == {"f": "a"}


def test_state_arrays_are_read_only() -> None:
    index = ConceptGraphIndex.from_texts(POOL[:3], embedder=HashingEmbedder(DIM))
    corpus = index.state.corpus
    with pytest.raises(ValueError, match="read-only"):
        corpus.sentence_vectors[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        corpus.sentence_terms.data[0] = 5
    chunk = index.get(corpus.ids[0])
    chunk.metadata["x"] = 1  # a copy: the state is untouched
    assert "x" not in index.get(corpus.ids[0]).metadata


# ------------------------------------------------------------------ properties
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CONFIGS)), budget=st.integers(1, 200),
       query=st.sampled_from([*QUERIES, "zzz qqq", "the"]))
def test_budget_ids_and_determinism(name: str, budget: int, query: str) -> None:
    index = _built(name)
    result = index.retrieve(query, budget=budget)
    assert result.tokens <= budget
    assert sum(count_tokens(c.text) for c in result.chunks) == result.tokens
    for hit in result.chunks:
        parent = hit.chunk.metadata.get("parent_chunk_id", hit.id)
        assert parent in index and hit.text in index.get(parent).text
    again = index.retrieve(query, budget=budget)
    assert [(c.id, c.score, c.provenance) for c in again.chunks] == [
        (c.id, c.score, c.provenance) for c in result.chunks]


_CACHE: dict[str, ConceptGraphIndex] = {}


def _built(name: str) -> ConceptGraphIndex:
    if name not in _CACHE:
        _CACHE[name] = ConceptGraphIndex.from_texts(
            POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM), config=CONFIGS[name],
            metadatas=[{"n": i, "ü": ["ñ", None]} for i in range(len(POOL))])
    return _CACHE[name]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(CONFIGS)),
       dropped=st.lists(st.sampled_from(range(len(POOL))), max_size=4, unique=True))
def test_save_load_identity(name: str, dropped: list[int], tmp_path: Path) -> None:
    index = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM),
                                         config=CONFIGS[name])
    if dropped:
        index.delete(ids_for([POOL[i] for i in dropped]))
    path = tmp_path / f"{name}-{'-'.join(map(str, dropped))}"
    index.save(str(path))
    loaded = ConceptGraphIndex.load(str(path), HashingEmbedder(DIM))
    assert_same_index(loaded, index)
    assert loaded.config == index.config
    assert check_loaded(loaded, QUERIES, 50) == ""


# ------------------------------------------------------------------ 6. query hygiene
@pytest.mark.parametrize("vector, message", [
    (np.full(DIM, np.nan), "non-finite"), (np.full(DIM, np.inf), "non-finite"),
    (np.zeros(DIM), "all zeros"), (np.ones(DIM + 1), "shape"),
])
def test_bad_query_vectors_raise(vector: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _built("default").retrieve_by_vector(vector)


def test_query_vectors_are_normalised() -> None:
    index = _built("default")
    q = HashingEmbedder(DIM).embed(["analytical engine"])[0]
    a = index.retrieve_by_vector(q, query="analytical engine")
    b = index.retrieve_by_vector(q * 7.5, query="analytical engine")
    assert [c.id for c in a.chunks] == [c.id for c in b.chunks]
    assert [c.score for c in b.chunks] == pytest.approx([c.score for c in a.chunks], abs=1e-6)



@pytest.mark.parametrize("name", ["default", "paper"])
def test_min_score_is_a_relevance_floor(name: str) -> None:
    # a query sharing no word with the corpus (and, at 1024 buckets, no hash bucket either)
    wide = ConceptGraphIndex.from_texts(POOL, embedder=HashingEmbedder(1024),
                                        config=CONFIGS[name])
    assert wide.retrieve("xylophone quartz", min_score=0.1).chunks == ()
    assert len(wide.retrieve("xylophone quartz").chunks) > 0  # without a floor: a full budget
    index = _built(name)
    embed = HashingEmbedder(DIM).embed
    query = "Grace Hopper compiler"
    q = embed([query])[0]
    result = index.retrieve(query, min_score=0.3, budget=10_000)
    assert result.chunks
    best_sentence = {c.id: max(float(embed([c.text[s:e]])[0] @ q)
                               for s, e in split_sentences(c.text)) for c in result.chunks}
    assert min(best_sentence.values()) >= 0.3
    every = {cid: max(float(embed([index.get(cid).text[s:e]])[0] @ q)
                      for s, e in split_sentences(index.get(cid).text))
             for cid in index.chunk_ids}
    above = {cid for cid, s in every.items() if s >= 0.3}
    if name == "default":  # the fused ranking ranks every unit: all above the floor fit
        assert set(best_sentence) == above
    else:  # the paper's search only reaches the chunks of the concepts it walks
        assert set(best_sentence) <= above
    with pytest.raises(ValueError, match="min_score"):
        index.retrieve(query, min_score=1.5)


def test_selection_reports_when_one_chunk_exceeds_kappa() -> None:
    long_text = " ".join(f"Sentence {i} about the long report." for i in range(40))
    index = ConceptGraphIndex.from_texts([long_text, "A short note."], ids=["long", "short"],
                                         embedder=HashingEmbedder(DIM))
    tokens = {cid: index.get(cid).tokens for cid in index.chunk_ids}
    share = max(tokens.values()) / sum(tokens.values())
    # kappa 0.2 of tokens: the short note alone fits (3 / ~330 tokens) if it ranks first;
    # ranked by PageRank per token it does, so nothing is exceeded
    selection = index.select(0.2, by="tokens")
    assert not selection.report.exceeds_kappa
    # with one chunk only, that chunk is kept whatever kappa says, and the report says so
    alone = ConceptGraphIndex.from_texts([long_text], embedder=HashingEmbedder(DIM))
    report = alone.select(0.2, by="tokens").report
    assert report.chunks_kept == 1 and report.exceeds_kappa
    assert "over kappa: the best chunk alone is 100.0% of the tokens" in report.summary()
    assert report.to_dict()["exceeds_kappa"] is True
    assert share > 0.2


def test_random_selection_draws_by_id() -> None:
    small = ConceptGraphIndex.from_texts(POOL[:4], ids=ids_for(POOL[:4]),
                                         embedder=HashingEmbedder(DIM))
    large = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM))
    s = small.select(1.0, method="random", seed=3).scores
    big = large.select(1.0, method="random", seed=3).scores
    assert s == {cid: big[cid] for cid in s}
    assert small.select(1.0, method="random", seed=4).scores != s
    assert all(0.0 <= v < 1.0 for v in big.values())


def test_reconfigured_shares_or_rederives() -> None:
    index = _built("default")
    search_only = index.reconfigured(top_k=1, budget=40)
    assert search_only.state.graph is index.state.graph
    assert search_only.state.corpus is index.state.corpus
    regraph = index.reconfigured(theta_co=2)
    fresh = ConceptGraphIndex.from_texts(
        POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM),
        metadatas=[{"n": i, "ü": ["ñ", None]} for i in range(len(POOL))],
        config=ConceptGraphConfig(**{**SMALL, "theta_co": 2}))
    assert_same_index(regraph, fresh)
    with pytest.raises(ValueError, match="unit_tokens changes the stored chunks"):
        index.reconfigured(unit_tokens=50)
    with pytest.raises(ValueError, match="chunk_similarity"):
        index.reconfigured(chunk_similarity="direct")
    assert index.config.top_k == 3  # the original is untouched


def test_metadata_must_be_json_without_nan() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM))
    with pytest.raises(TypeError, match=r"metadatas\[0\] is not JSON-serialisable"):
        index.add(["Some text."], metadatas=[{"x": float("nan")}])
    with pytest.raises(ValueError, match=r"metadatas\[0\] contains"):
        index.add(["Some text."], metadatas=[{"x": "bad \ud800"}])
    with pytest.raises(ValueError, match=r"ids\[0\] contains"):
        index.add(["Some text."], ids=["id\x00"])
    assert len(index) == 0


# ------------------------------------------------------------------ 7. any run of changes
class IndexRuns(RuleBasedStateMachine):
    """Adds (new chunks, metadata upserts, deleted chunks back), deletes, and saves
    each followed by a load, in any order, on an index of any config, over HNSW or the
    exact search: after every step it is the index built at once from the chunks it
    holds. The updates leave deleted rows in HNSW segments and add segments, and a
    load maps the saved ones; none of that may show."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="index-runs-"))
        self.held: dict[str, tuple[str, dict[str, Any] | None]] = {}

    @initialize(name=st.sampled_from(sorted(CONFIGS)), search=st.sampled_from(["hnsw", "exact"]),
                first=st.lists(st.sampled_from(range(len(POOL))), min_size=1, max_size=6,
                               unique=True),
                spilled=st.booleans(), concepts=st.sampled_from(["exact", "codes", "hnsw"]))
    def build(self, name: str, search: str, first: list[int], spilled: bool,
              concepts: str) -> None:
        # concepts: the fused ranking's direct concepts scanned (floats or byte codes), or
        # proposed by an HNSW graph that updates keep (over so few it proposes every one)
        self.config = dataclasses.replace(
            CONFIGS[name], vector_index=search,
            concept_search=concepts if CONFIGS[name].ranking == "fused" else "exact")
        # spilled: every array and text a build or an update makes goes to a spill file
        self.spill = VectorSpill(min_bytes=0) if spilled else None
        texts = [POOL[i] for i in first]
        self.index = ConceptGraphIndex.from_texts(texts, ids=ids_for(texts),
                                                  embedder=HashingEmbedder(DIM),
                                                  config=self.config, vector_spill=self.spill)
        self.held = {cid: (text, None) for cid, text in zip(ids_for(texts), texts, strict=True)}

    @rule(chosen=st.lists(st.sampled_from(range(len(POOL))), min_size=1, max_size=3,
                          unique=True),
          tag=st.sampled_from([None, 1, 2]))
    def add(self, chosen: list[int], tag: int | None) -> None:
        texts = [POOL[i] for i in chosen]
        ids = ids_for(texts)
        self.index.add(texts, ids=ids, metadatas=None if tag is None else [{"tag": tag}] * len(ids))
        for cid, text in zip(ids, texts, strict=True):
            kept = self.held.get(cid, (text, None))[1]
            self.held[cid] = (text, kept if tag is None else {"tag": tag})

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if len(self.held) < 2:
            return
        doomed = data.draw(st.lists(st.sampled_from(sorted(self.held)), min_size=1,
                                    max_size=len(self.held) - 1, unique=True))
        self.index.delete(doomed)
        for cid in doomed:
            del self.held[cid]

    @rule(changes=st.fixed_dictionaries({}, optional={
        "theta_co": st.sampled_from([1, 2]), "concepts_per_chunk": st.sampled_from([2, 3]),
        "concept_links": st.sampled_from(["contains", "extracted"]),
        "pagerank_weighted": st.booleans(), "vector_index": st.sampled_from(["hnsw", "exact"]),
        "top_k": st.sampled_from([2, 3]), "walk_hops": st.sampled_from(["auto", 0, 2]),
        "concept_search": st.sampled_from(["auto", "exact", "codes", "hnsw"])}))
    def reconfigure(self, changes: dict[str, Any]) -> None:
        """Graph knobs derive the graph again from the chunks it holds; search knobs
        share it. (Not ``candidates`` below the units held: HNSW's quantiser is trained
        per segment, so an updated index's few candidates may be other near-ties than
        a build's, within the approximation the scale benchmark measures.)"""
        if self.config.ranking == "paper":  # which scans every concept
            changes.pop("concept_search", None)
        self.index = self.index.reconfigured(**changes)
        self.config = dataclasses.replace(self.config, **changes)

    @rule()
    def save_and_load(self) -> None:
        self.index.save(str(self.folder / "idx"))
        self.index = ConceptGraphIndex.load(str(self.folder / "idx"), HashingEmbedder(DIM),
                                            vector_spill=self.spill)

    @invariant()
    def it_is_the_index_built_at_once(self) -> None:
        if not self.held:  # before the build
            return
        ids = sorted(self.held)
        at_once = ConceptGraphIndex.from_texts(
            [self.held[i][0] for i in ids], ids=ids, embedder=HashingEmbedder(DIM),
            metadatas=[self.held[i][1] or {} for i in ids], config=self.config)
        assert_same_index(self.index, at_once)
        graph = self.index.state.graph
        held = graph.held_concept_index()
        if self.config.concept_search == "hnsw":  # held from the build or the first query
            assert held is not None
        if held is not None:  # kept through updates and loads: every usable concept once
            held.check_holds(graph.unit_linked_concepts, DIM)
        for query in QUERIES:  # past the small budget too: every chunk the ranking places
            assert [(c.id, c.score) for c in self.index.retrieve(query, budget=10**6).chunks] \
                == [(c.id, c.score) for c in at_once.retrieve(query, budget=10**6).chunks]

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        # hypothesis keeps a finished machine in a reference cycle: without this its
        # indexes' mapped files stay open until the next full collection (500 over a run)
        vars(self).clear()


TestIndexRuns = IndexRuns.TestCase
TestIndexRuns.settings = settings(max_examples=40, stateful_step_count=8, deadline=None,
                                  suppress_health_check=[HealthCheck.too_slow])
