"""A saved graph restores to the derived one, and every saved part that disagrees is caught."""

from __future__ import annotations

import itertools
import json
import mmap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.faults import rehash, swap_concept_vectors
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.graph import edges as edges_module
from shared_core.graph.edges import concept_sums
from shared_core.state import DerivedGraph, derive_graph
from shared_core.state import derived as derived_module
from shared_core.state import saved as saved_module
from shared_core.state.derived import link_concepts
from shared_core.state.saved import SavedGraph
from shared_core.store import MATRIX_PARTS, CorruptIndexError, index_folder, read_manifest
from tests.shared_core.state.test_refresh import CHUNKS, assert_equal_graphs
from tests.shared_core.test_index_state import CONFIGS

DIM = 64


@pytest.fixture(autouse=True)
def _sums_kept() -> Iterator[None]:
    """These corpora are too small for the default rule to keep the concepts' sums: keep
    them always, so every save here holds them (``test_a_small_corpus_keeps_no_sums``
    checks the default). Set by hand: tests undo their own monkeypatches midway."""
    default = derived_module.SUMS_MIN_SENTENCES
    derived_module.SUMS_MIN_SENTENCES = 0
    yield
    derived_module.SUMS_MIN_SENTENCES = default


def saved_index(tmp_path: Path, name: str = "default") -> tuple[ConceptGraphIndex, Path]:
    index = ConceptGraphIndex.from_texts(CHUNKS[:20], ids=[f"c{i:02d}" for i in range(20)],
                                         embedder=HashingEmbedder(DIM), config=CONFIGS[name])
    index.save(str(tmp_path / "idx"))
    return index, index_folder(tmp_path / "idx")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_loaded_graph_equals_the_derived_one_without_finding_edges(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    index, _ = saved_index(tmp_path, name)
    manifest = read_manifest(tmp_path / "idx")
    pairs = index.state.graph.pairs
    assert pairs is not None and len(pairs) >= len(index.state.graph.edges)
    assert manifest["graph"] == {"concepts": len(index.state.graph.concepts),
                                 "pairs": len(pairs)}

    monkeypatch.setattr(edges_module, "cooccurrence", _no_count)
    # the adjacency is mapped from the save, not built from the pairs' edges again
    monkeypatch.setattr(derived_module, "edges_of", _not_on_load(derived_module.edges_of))
    monkeypatch.setattr(saved_module, "adjacency", _not_on_load(saved_module.adjacency))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    monkeypatch.undo()
    assert _mapped(loaded.state.graph.adjacency.indices)
    assert loaded.state.graph.edge_list is None  # the edges come from the pairs on demand
    assert_equal_graphs(loaded.state.graph, derive_graph(loaded.state.corpus, CONFIGS[name]))
    np.testing.assert_array_equal(loaded.state.graph.rank, index.state.graph.rank)


def _as_saved_without(folder: Path, names: Sequence[str]) -> None:
    """Rewrite a save as one made before these arrays were kept: files and listing gone."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in names:
        (folder / f"{name}.npy").unlink()
        del manifest["files"][f"{name}.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _tamper(folder: Path, name: str, change: object) -> None:
    array = np.load(folder / f"{name}.npy", allow_pickle=False)
    array = change(array)  # type: ignore[operator]
    np.save(folder / f"{name}.npy", array, allow_pickle=False)
    rehash(folder, f"{name}.npy")


def _raise_first(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[0] += 1_000
    return out


def _duplicate_second(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[1] = out[0]
    return out


TAMPERING = [
    ("target", _raise_first, "join two of the"),
    ("source", lambda a: a[::-1].copy(), "sorted"),
    ("source", lambda a: np.delete(a, 0), "differ in length|shape"),
    ("count", _raise_first, "exceeds the chunks"),
    ("count", lambda a: a * 0, "below theta_co"),
]
RANK_TAMPERING = [
    ("graph_rank", lambda a: np.roll(a, 1), "PageRank"),
    ("graph_rank", lambda a: -a, "PageRank"),
]
# the saved matrices' structural rules (store._read_sparse)
MATRIX_TAMPERING = [
    ("concept_links_indptr", lambda a: a[::-1].copy(), "start at 0 and never decrease"),
    ("concept_links_indices", lambda a: a + 10_000, r"must be in \[0, "),
    ("sentence_concepts_indices", lambda a: a[::-1].copy(), "increase strictly within each row"),
    ("unit_bm25_indices", lambda a: a[::-1].copy(), "increase strictly within each column"),
    ("unit_bm25_data", lambda a: -a, "finite and positive"),
    ("concept_links_data", lambda a: a * np.inf, "finite and positive"),
    ("sentence_concepts_data", lambda a: a[1:].copy(), "shape"),
    ("unit_bm25_indptr", lambda a: a.astype(np.int64), "dtype int64"),
    ("concept_adjacency_data", lambda a: -a, "finite and positive"),
    ("concept_adjacency_indices", lambda a: a[::-1].copy(), "increase strictly within each row"),
]


@pytest.mark.parametrize(("name", "change", "message"), [
    *((f"graph_pair_{part}", change, message) for part, change, message in TAMPERING),
    ("graph_pair_target", _duplicate_second, "each pair once|join two"),
    *RANK_TAMPERING,
    *MATRIX_TAMPERING,
])
def test_a_saved_graph_that_disagrees_with_its_chunks_is_refused(
        tmp_path: Path, name: str, change: object, message: str) -> None:
    _, folder = saved_index(tmp_path)
    _tamper(folder, name, change)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def as_saved_before_strong_pairs(folder: Path, graph: DerivedGraph) -> None:
    """Rewrite a save as saves before strong pairs wrote it: the edges alone."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for part in ("source", "target", "count"):
        (folder / f"graph_pair_{part}.npy").unlink()
        del manifest["files"][f"graph_pair_{part}.npy"]
    edges = graph.edges
    for part, array in (("source", edges.source), ("target", edges.target),
                        ("cooccurrence", edges.cooccurrence)):
        np.save(folder / f"graph_edge_{part}.npy", array.astype(np.int64), allow_pickle=False)
    manifest["graph"] = {"concepts": len(graph.concepts), "edges": len(edges)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for part in ("source", "target", "cooccurrence"):
        rehash(folder, f"graph_edge_{part}.npy")


@pytest.mark.parametrize("name", ["default", "units"])
def test_a_save_of_edges_alone_loads_and_its_first_refresh_derives_the_graph(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    index, folder = saved_index(tmp_path, name)
    as_saved_before_strong_pairs(folder, index.state.graph)
    monkeypatch.setattr(edges_module, "cooccurrence", _no_count)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    monkeypatch.undo()
    graph = loaded.state.graph
    assert graph.pairs is None  # the counts below theta_sem were never saved
    for part in ("source", "target", "cooccurrence", "dice"):
        np.testing.assert_array_equal(getattr(graph.edges, part),
                                      getattr(index.state.graph.edges, part), part)
    np.testing.assert_array_equal(graph.rank, index.state.graph.rank)
    loaded.save(str(tmp_path / "again"))  # still without strong pairs: the edges again
    assert read_manifest(tmp_path / "again")["graph"] == read_manifest(tmp_path / "idx")["graph"]
    loaded.add(CHUNKS[20:21], ids=["c20"])
    assert loaded.state.graph.pairs is not None
    assert_equal_graphs(loaded.state.graph, derive_graph(loaded.state.corpus, CONFIGS[name]))
    loaded.save(str(tmp_path / "refreshed"))
    assert set(read_manifest(tmp_path / "refreshed")["graph"]) == {"concepts", "pairs"}


_COUNT = edges_module.cooccurrence


def _not_on_load(build: Callable[..., object]) -> Callable[..., object]:
    """``build`` (of the edges or the adjacency) refusing any non-empty input."""
    def refuse(edges: object, *rest: object, **knobs: object) -> object:
        if len(edges):  # type: ignore[arg-type]  # an empty index is derived first
            raise AssertionError("a load with a saved adjacency must not build it again")
        return build(edges, *rest, **knobs)
    return refuse


def _no_count(links: sp.csr_matrix) -> sp.csr_matrix:
    if links.shape[0]:  # an empty index is derived first, then replaced
        raise AssertionError("a load with a saved graph must not count co-occurrences")
    return _COUNT(links)


@pytest.mark.parametrize(("name", "change", "message"), [
    *((f"graph_edge_{'cooccurrence' if part == 'count' else part}", change, message)
      for part, change, message in TAMPERING),
    *RANK_TAMPERING,
])
def test_a_save_of_edges_alone_that_disagrees_with_its_chunks_is_refused(
        tmp_path: Path, name: str, change: object, message: str) -> None:
    index, folder = saved_index(tmp_path)
    as_saved_before_strong_pairs(folder, index.state.graph)
    _tamper(folder, name, change)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def _dissimilar_config_index() -> tuple[ConceptGraphIndex, int, np.ndarray]:
    """theta_sem 0.3; concept 0's first strong pair and a concept it is not similar to."""
    config = CONFIGS["default"].to_dict() | {"theta_sem": 0.3}
    index = ConceptGraphIndex.from_texts(CHUNKS[:20], ids=[f"c{i:02d}" for i in range(20)],
                                         embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig.from_dict(config))
    graph = index.state.graph
    cos = graph.vectors[0] @ graph.vectors.T
    far = int(np.flatnonzero(cos[1:] < 0.3)[-1]) + 1  # concept 0 and ``far`` are not similar
    return index, far, cos


def test_an_edge_moved_to_a_dissimilar_pair_fails_theta_sem(tmp_path: Path) -> None:
    """A save of edges alone: retarget an edge to a pair whose recomputed cosine fails."""
    index, far, _ = _dissimilar_config_index()
    graph = index.state.graph
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    as_saved_before_strong_pairs(folder, graph)
    first_from_0 = int(np.flatnonzero(graph.edges.source == 0)[0])
    assert graph.edges.target[first_from_0] != far

    def retarget(a: np.ndarray) -> np.ndarray:
        out = a.copy()
        out[first_from_0] = far
        return out

    _tamper(folder, "graph_edge_target", retarget)
    with pytest.raises(CorruptIndexError, match=r"theta_co or theta_sem|sorted"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_a_pair_moved_to_a_dissimilar_pair_is_no_edge(tmp_path: Path) -> None:
    """Strong pairs carry no decision on disk: a non-edge pair moved to another dissimilar
    pair loads (counts are not recounted) with its decision taken from the vectors."""
    index, _, _ = _dissimilar_config_index()
    graph = index.state.graph
    pairs = graph.pairs
    assert pairs is not None
    position, far = _movable_non_edge(graph)
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")

    def retarget(a: np.ndarray) -> np.ndarray:
        out = a.copy()
        out[position] = far
        return out

    _tamper(folder, "graph_pair_target", retarget)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    moved = loaded.state.graph.pairs
    assert moved is not None and moved.target[position] == far
    assert not moved.edge[position]
    assert loaded.edges == index.edges


def _movable_non_edge(graph: DerivedGraph) -> tuple[int, int]:
    """A non-edge pair (a, b) and a concept c, (a, c) no pair, that (a, c) can replace it
    in sorted order and keep its count, with cos(a, c) below theta_sem 0.3."""
    pairs = graph.pairs
    assert pairs is not None
    n = len(graph.concepts)
    keys = pairs.keys(n).tolist()
    linked = graph.concept_chunk_counts
    for i in np.flatnonzero(~pairs.edge).tolist():
        a = int(pairs.source[i])
        low = keys[i - 1] if i else -1
        high = keys[i + 1] if i + 1 < len(keys) else n * n
        for c in range(a + 1, n):
            if (low < a * n + c < high and c != pairs.target[i]
                    and float(graph.vectors[a] @ graph.vectors[c]) < 0.3
                    and pairs.count[i] <= min(linked[a], linked[c])):
                return i, c
    raise AssertionError("no movable pair in this corpus")


def test_a_graph_entry_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    _, folder = saved_index(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["graph"]["pairs"] += 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="shape"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_an_index_saved_without_a_graph_derives_it(tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["graph"]  # as saves before this change wrote it
    (folder / "manifest.json").write_text(json.dumps(manifest))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert_equal_graphs(loaded.state.graph, index.state.graph)


# ------------------------------------------------ concepts, vectors, decisions as read
_DERIVED_FILES = ("concept_terms", "concept_vectors", "concept_sums", "summed_concepts",
                  "graph_pair_edge", "graph_pair_margin")


def _refuse(name: str) -> object:
    """Stands in for ``name``: the empty index every index starts from may call it."""
    real = getattr(saved_module, name, None) or getattr(derived_module, name)

    def fail(*args: object, **kwargs: object) -> object:
        if getattr(args[0], "shape", (0,))[0]:
            raise AssertionError(f"a load of a save that holds them must not call {name}")
        return real(*args, **kwargs)
    return fail


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_load_takes_the_saved_concepts_vectors_and_decisions_as_read(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    index, folder = saved_index(tmp_path, name)
    assert {f"{part}.npy" for part in _DERIVED_FILES} <= set(read_manifest(folder.parent)["files"])
    monkeypatch.setattr(saved_module, "concept_sums", _refuse("concept_sums"))
    monkeypatch.setattr(saved_module, "strong_pairs_of", _refuse("strong_pairs_of"))
    if CONFIGS[name].concept_links == "contains":  # extracted links need the extraction
        monkeypatch.setattr(derived_module, "extract_concepts", _refuse("extract_concepts"))
    monkeypatch.setattr(derived_module, "concept_sums", _refuse("concept_sums"))
    # the links and BM25 weights are mapped from the save, not derived from the counts
    monkeypatch.setattr(saved_module, "link_concepts",
                        _never("the concept links", saved_module.link_concepts))
    monkeypatch.setattr(derived_module.BM25Scorer, "from_counts",
                        _never("BM25 weights", derived_module.BM25Scorer.from_counts))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    monkeypatch.undo()
    graph = loaded.state.graph
    assert _mapped(graph.links.indices) and _mapped(graph.unit_bm25.weights.data)
    assert_equal_graphs(graph, derive_graph(loaded.state.corpus, CONFIGS[name]))
    pairs, before = loaded.state.graph.pairs, index.state.graph.pairs
    assert pairs is not None and before is not None
    np.testing.assert_array_equal(pairs.margin, before.margin)
    assert [r.chunks for r in map(loaded.retrieve, ("engine", "program"))] == \
        [r.chunks for r in map(index.retrieve, ("engine", "program"))]


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array`` views a mapped file (scipy keeps a view, not the memmap itself)."""
    while array is not None:
        if isinstance(array, np.memmap | mmap.mmap):
            return True
        array = getattr(array, "base", None)
    return False


def _never(name: str, real: Callable[..., object]) -> object:
    """Stands in for ``real`` where ``_refuse`` cannot find it by name."""
    def fail(*args: object, **kwargs: object) -> object:
        if getattr(args[0], "shape", (0,))[0] or getattr(args[0], "sentence_spans", ()):
            raise AssertionError(f"a load of a save that holds them must not derive {name}")
        return real(*args, **kwargs)
    return fail


# ------------------------------------------------------------- the graph's matrices
_WALK_FILES = [*(f"walk_postings_{part}" for part in MATRIX_PARTS), "walk_entry_unit"]
_POSTINGS_FILES = [f"concept_postings_{part}" for part in MATRIX_PARTS]
_MATRIX_FILES = [*(f"{name}_{part}" for name in ("concept_links", "sentence_concepts",
                                                  "unit_bm25", "concept_adjacency")
                   for part in MATRIX_PARTS), *_WALK_FILES, *_POSTINGS_FILES]
_ADJACENCY_FILES = [f"concept_adjacency_{part}" for part in MATRIX_PARTS]


def _lower_first_value(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[0] = out[0] / 2  # still finite and positive
    return out


@pytest.mark.parametrize(("name", "change", "message"), [
    ("unit_bm25_data", _lower_first_value, "unit bm25 are not"),
    ("concept_links_data", _lower_first_value, "concept links are not"),
    ("sentence_concepts_data", _lower_first_value, "sentence concepts are not"),
])
def test_verify_refuses_saved_matrices_that_obey_the_rules_but_differ(
        tmp_path: Path, name: str, change: object, message: str) -> None:
    """Their values rest on the checksum: a default load maps them as they are, a
    verifying load derives them again and refuses a save whose matrices differ."""
    index, folder = saved_index(tmp_path)
    _tamper(folder, name, change)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.stats()["chunks"] == index.stats()["chunks"]
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)


def test_a_saved_adjacency_must_hold_each_edge_twice_and_carry_the_saved_pagerank(
        tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    # the last entry dropped (indptr, indices and data kept consistent): an edge once
    _tamper(folder, "concept_adjacency_indptr", lambda a: np.append(a[:-1], a[-1] - 1))
    _tamper(folder, "concept_adjacency_indices", lambda a: a[:-1].copy())
    _tamper(folder, "concept_adjacency_data", lambda a: a[:-1].copy())
    with pytest.raises(CorruptIndexError, match="adjacency is not that of the saved pairs"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    # one weight halved: every edge is there, but the saved PageRank is not its fixed point
    index.save(str(tmp_path / "other"))
    other = index_folder(tmp_path / "other")
    _tamper(other, "concept_adjacency_data", _lower_first_value)
    with pytest.raises(CorruptIndexError, match="not the PageRank"):
        ConceptGraphIndex.load(str(tmp_path / "other"), HashingEmbedder(DIM))
    with pytest.raises(CorruptIndexError, match="adjacency is not that of the saved pairs"):
        ConceptGraphIndex.load(str(tmp_path / "other"), HashingEmbedder(DIM), verify=True)


def test_a_units_save_keeps_the_units_links_and_verify_checks_them(tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path, "units")
    files = read_manifest(tmp_path / "idx")["files"]
    assert {f"unit_links_{part}.npy" for part in MATRIX_PARTS} <= set(files)
    verified = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    assert_equal_graphs(verified.state.graph, index.state.graph)
    _tamper(folder, "unit_links_data", _lower_first_value)
    with pytest.raises(CorruptIndexError, match="unit links are not"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)


def test_sentence_links_moved_off_their_terms_are_refused(tmp_path: Path) -> None:
    """Another sentence row's entry: sentence counts per concept no longer match its term's."""
    _, folder = saved_index(tmp_path)
    indices = np.load(folder / "sentence_concepts_indices.npy", allow_pickle=False)
    indptr = np.load(folder / "sentence_concepts_indptr.npy", allow_pickle=False)
    # the first sentence's first concept becomes a concept that sentence lacks
    row = indices[indptr[0]:indptr[1]]
    other = int(np.setdiff1d(np.arange(int(indices.max()) + 1), row)[0])
    _tamper(folder, "sentence_concepts_indices",
            lambda a: np.concatenate([np.sort(np.append(row[1:], other)), a[len(row):]]
                                     ).astype(a.dtype))
    with pytest.raises(CorruptIndexError, match="sentences their concepts' terms are in"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_matrices_listed_in_part_are_refused_and_unlisted_ones_derived(tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    partial = json.loads(json.dumps(manifest))
    del partial["files"]["unit_bm25_data.npy"]
    (folder / "manifest.json").write_text(json.dumps(partial))
    with pytest.raises(CorruptIndexError, match="or none of them"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    partial = json.loads(json.dumps(manifest))
    del partial["files"]["concept_adjacency_indices.npy"]
    (folder / "manifest.json").write_text(json.dumps(partial))
    with pytest.raises(CorruptIndexError, match="all or none of concept_adjacency"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    bad_index = json.loads(json.dumps(manifest))
    bad_index["matrices"] = {"index": "float16"}
    (folder / "manifest.json").write_text(json.dumps(bad_index))
    with pytest.raises(CorruptIndexError, match="'matrices' must be"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    # an eleventh-round save, the adjacency not kept: it is built from the pairs again
    without_adjacency = json.loads(json.dumps(manifest))
    for file in _ADJACENCY_FILES:
        del without_adjacency["files"][f"{file}.npy"]
    (folder / "manifest.json").write_text(json.dumps(without_adjacency))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert _mapped(loaded.state.graph.links.indices)
    assert not _mapped(loaded.state.graph.adjacency.indices)
    assert_equal_graphs(loaded.state.graph, index.state.graph)
    # a save from before they were kept: derived again, equal, and kept by the next save
    for file in _MATRIX_FILES:
        (folder / f"{file}.npy").unlink()
        del manifest["files"][f"{file}.npy"]
    del manifest["matrices"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert not _mapped(loaded.state.graph.links.indices)
    assert_equal_graphs(loaded.state.graph, index.state.graph)
    loaded.save(str(tmp_path / "again"))
    assert {f"{file}.npy" for file in _MATRIX_FILES} <= set(
        read_manifest(tmp_path / "again")["files"])


def _first_non_edge_made_an_edge(folder: Path) -> None:
    """Flip a non-edge to an edge with a positive margin, as a careful editor would."""
    edge = np.load(folder / "graph_pair_edge.npy", allow_pickle=False)
    margin = np.load(folder / "graph_pair_margin.npy", allow_pickle=False)
    first = int(np.flatnonzero(~edge)[0])
    edge[first], margin[first] = True, np.float32(0.05)
    np.save(folder / "graph_pair_edge.npy", edge, allow_pickle=False)
    np.save(folder / "graph_pair_margin.npy", margin, allow_pickle=False)
    rehash(folder, "graph_pair_edge.npy")
    rehash(folder, "graph_pair_margin.npy")


def _a_concept_term_replaced(folder: Path, corpus_terms: int) -> None:
    """Swap the last concept for the last term that is not one: sorted, distinct, valid."""
    terms = np.load(folder / "concept_terms.npy", allow_pickle=False)
    free = np.setdiff1d(np.arange(corpus_terms), terms)
    changed = np.sort(np.append(terms[:-1], free[-1]))
    np.save(folder / "concept_terms.npy", changed, allow_pickle=False)
    rehash(folder, "concept_terms.npy")


@pytest.mark.parametrize("edit, message", [
    ("vectors", "concept vectors are not the means"),
    ("decision", "pair decisions are not those"),
    ("terms", "concept terms are not the concepts"),
])
def test_verify_refuses_saved_values_that_obey_the_rules_but_differ(
        tmp_path: Path, edit: str, message: str) -> None:
    """Such values rest on the checksum: a default load takes them (and the index differs
    from the one saved; an extra edge fails the PageRank check first, another concept
    term the count of its sentences), a
    verifying load derives them again and refuses the save."""
    config = ConceptGraphConfig.from_dict(CONFIGS["default"].to_dict() | {"theta_sem": 0.3})
    index = ConceptGraphIndex.from_texts(CHUNKS[:20], ids=[f"c{i:02d}" for i in range(20)],
                                         embedder=HashingEmbedder(DIM), config=config)
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    if edit == "vectors":
        swap_concept_vectors(folder)
    elif edit == "decision":
        _first_non_edge_made_an_edge(folder)
    else:
        _a_concept_term_replaced(folder, len(index.state.corpus.terms))
    if edit == "vectors":
        graph = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM)).state.graph
        assert not np.array_equal(graph.vectors, index.state.graph.vectors)
    elif edit == "decision":  # an edge more: the saved adjacency lacks it
        with pytest.raises(CorruptIndexError, match="adjacency is not that of the saved pairs"):
            ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    else:  # the saved links hold the old term's sentences, not as many as the new one's
        with pytest.raises(CorruptIndexError, match="sentences their concepts' terms are in"):
            ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    # an untouched save passes the verifying load, and equals the one saved
    index.save(str(tmp_path / "clean"))
    verified = ConceptGraphIndex.load(str(tmp_path / "clean"), HashingEmbedder(DIM), verify=True)
    assert_equal_graphs(index.state.graph, verified.state.graph)


@pytest.mark.parametrize(("name", "change", "message"), [
    ("concept_vectors", lambda a: a * 2, "not of unit length"),
    ("concept_vectors", lambda a: np.where(np.isfinite(a), a, 0) * np.nan, "non-finite"),
    ("concept_terms", lambda a: a[::-1].copy(), "sorted, distinct"),
    ("concept_terms", lambda a: a + 10_000, "sorted, distinct"),
    ("graph_pair_margin", lambda a: -a - np.float32(0.01), "decision's sign"),
    ("graph_pair_margin", lambda a: a + np.float32(5), "decision's sign"),
    ("graph_pair_edge", lambda a: ~a, "decision's sign"),
    ("graph_pair_edge", lambda a: a[1:].copy(), "shape"),
    ("concept_sums", lambda a: a * 3, "do not give the saved concept vectors"),
    ("concept_sums", lambda a: a[::-1].copy(), "do not give the saved concept vectors"),
    ("concept_sums", lambda a: a[:, 1:].copy(), "shape"),
    ("concept_sums", lambda a: a[1:].copy(), "one for each of the"),
    ("summed_concepts", lambda a: a[::-1].copy(), "sorted, distinct concepts"),
    ("summed_concepts", lambda a: a + 1, "sorted, distinct concepts"),
    ("summed_concepts", lambda a: np.roll(a, 1), "sorted, distinct concepts"),
])
def test_saved_values_that_break_a_rule_are_refused(
        tmp_path: Path, name: str, change: object, message: str) -> None:
    config = ConceptGraphConfig.from_dict(CONFIGS["default"].to_dict() | {"theta_sem": 0.3})
    ConceptGraphIndex.from_texts(CHUNKS[:20], ids=[f"c{i:02d}" for i in range(20)],
                                 embedder=HashingEmbedder(DIM), config=config
                                 ).save(str(tmp_path / "idx"))
    _tamper(index_folder(tmp_path / "idx"), name, change)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_a_concept_vector_without_sentences_must_be_zero() -> None:
    """Eq. 1 gives a concept no sentence backs a zero vector; a saved one must agree."""
    counts = np.array([2, 0], dtype=np.int64)
    unit = np.array([[0.6, 0.8], [0.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(saved_module._checked_vectors(unit, counts, 2), unit)
    with pytest.raises(ValueError, match="not zero where no sentence"):
        saved_module._checked_vectors(np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32),
                                      counts, 2)
    with pytest.raises(ValueError, match="float32"):
        saved_module._checked_vectors(unit.astype(np.float64), counts, 2)


def test_a_save_from_before_these_were_kept_derives_them(tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    _as_saved_without(folder, _DERIVED_FILES)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert_equal_graphs(loaded.state.graph, index.state.graph)
    loaded.save(str(tmp_path / "again"))  # the next save keeps them
    assert {f"{part}.npy" for part in _DERIVED_FILES} <= set(
        read_manifest(tmp_path / "again")["files"])


def test_a_save_listing_a_margin_without_its_decision_is_refused(tmp_path: Path) -> None:
    _, folder = saved_index(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["graph_pair_edge.npy"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="without the other"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_a_decision_taken_at_theta_sem_in_float32_may_carry_a_tiny_negative_margin() -> None:
    """Found at 100 K passages: cos = float32(0.65) passes ``cos >= 0.65`` (compared in
    float32) while cos - 0.65 in float64 is -2.4e-8. Such a margin is within the float32
    rounding of theta_sem and must load; one beyond it must not."""
    theta = 0.65
    tie = float(np.float32(theta)) - theta
    assert -3e-8 < tie < 0  # float32(0.65) lies 2.4e-8 below 0.65
    one = np.zeros(1, dtype=np.int64)
    vectors = np.eye(2, dtype=np.float32)

    def restored(edge: bool, margin: float) -> np.ndarray:
        saved = SavedGraph(one, one + 1, one + 1, np.ones(2), edge=np.array([edge]),
                           margin=np.array([margin], dtype=np.float32))
        return saved_module._restored_pairs(saved, one, one + 1, one + 1, vectors, theta,
                                            verify=False).edge

    assert restored(True, np.float32(tie)).tolist() == [True]
    assert restored(False, -0.2).tolist() == [False]
    for edge, margin in ((True, -1e-6), (False, 1e-6), (True, -0.2)):
        with pytest.raises(ValueError, match="decision's sign"):
            restored(edge, margin)


# ------------------------------------------------------------- the walk's postings
QUERIES = ["Who directed the film about the river?", "Which city hosts the university?",
           "When was the bridge built?"]


def _retrieved(index: ConceptGraphIndex) -> list[list[tuple[str, float]]]:
    return [[(c.id, c.score) for c in index.retrieve(q).chunks] for q in QUERIES]


def _walk_parts(index: ConceptGraphIndex) -> tuple[sp.csc_matrix, np.ndarray]:
    walk = index.state.graph.walk
    assert walk is not None and walk.entry_unit is not None
    return walk.links_csc, walk.entry_unit


def test_a_load_maps_the_walk_postings_a_first_query_had_built(tmp_path: Path) -> None:
    index, _ = saved_index(tmp_path)
    assert {f"{file}.npy" for file in _WALK_FILES} <= set(
        read_manifest(tmp_path / "idx")["files"])  # the default ranking walks sentences
    built_csc, built_units = _walk_parts(index)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert _retrieved(loaded) == _retrieved(index)
    # after queries that walked, the postings and their units are still the save's
    # mapped files: neither was built again
    csc, units = _walk_parts(loaded)
    assert csc is loaded.state.graph.walk.given_csc  # type: ignore[union-attr]
    assert _mapped(csc.indices) and _mapped(csc.indptr) and _mapped(units)
    assert csc.shape == built_csc.shape
    for part in MATRIX_PARTS:
        np.testing.assert_array_equal(getattr(csc, part), getattr(built_csc, part))
    np.testing.assert_array_equal(units, built_units)
    verified = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    assert _retrieved(verified) == _retrieved(index)


def test_a_ranking_that_never_walks_saves_no_walk_postings(tmp_path: Path) -> None:
    index, _ = saved_index(tmp_path, "paper")
    assert not {f"{file}.npy" for file in _WALK_FILES} & set(
        read_manifest(tmp_path / "idx")["files"])
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    walk = loaded.state.graph.walk
    assert walk is not None and walk.given_csc is None
    assert _retrieved(loaded) == _retrieved(index)


def test_a_save_from_before_the_walk_postings_were_kept_builds_them(tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    _as_saved_without(folder, _WALK_FILES)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    walk = loaded.state.graph.walk
    assert walk is not None and walk.given_csc is None
    assert _retrieved(loaded) == _retrieved(index)  # the first query builds them
    assert not _mapped(walk.links_csc.indices)
    # listed in part: refused, naming the files that go together
    _refused_when_listed_in_part(index, tmp_path, "walk_entry_unit.npy",
                                 r"all or none of walk_postings_indptr\.npy")


def _refused_when_listed_in_part(index: ConceptGraphIndex, tmp_path: Path, unlisted: str,
                                 match: str) -> None:
    """A fresh save of ``index`` whose manifest leaves out ``unlisted`` is refused with
    ``match``: files that go together are listed all or none."""
    index.save(str(tmp_path / "other"))
    other = index_folder(tmp_path / "other")
    partial = json.loads((other / "manifest.json").read_text())
    del partial["files"][unlisted]
    (other / "manifest.json").write_text(json.dumps(partial))
    with pytest.raises(CorruptIndexError, match=match):
        ConceptGraphIndex.load(str(tmp_path / "other"), HashingEmbedder(DIM))


def _an_entry_moved(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first column's first sentence moved to the next column that lacks it, both
    columns kept sorted: canonical postings of the same size whose counts are wrong."""
    columns = [list(indices[a:b]) for a, b in itertools.pairwise(indptr)]
    moved = columns[0].pop(0)
    target = next(c for c in columns[1:] if moved not in c)
    target.append(moved)
    target.sort()
    counts = [len(c) for c in columns]
    return (np.concatenate([[0], np.cumsum(counts)]).astype(indptr.dtype),
            np.concatenate(columns).astype(indices.dtype))


@pytest.mark.parametrize(("file", "change", "message"), [
    ("walk_postings_indices", lambda a: a[::-1].copy(), "increase strictly within each column"),
    ("walk_postings_indices", lambda a: a + 10_000, r"must be in \[0, "),
    ("walk_postings_data", lambda a: -a, "finite and positive"),
    ("walk_entry_unit", lambda a: a + 10_000, r"every unit must be in \[0, "),
    ("walk_entry_unit", lambda a: a[1:].copy(), "shape"),
])
def test_walk_postings_that_break_a_rule_are_refused(tmp_path: Path, file: str,
                                                      change: object, message: str) -> None:
    _, folder = saved_index(tmp_path)
    _tamper(folder, file, change)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


@pytest.mark.parametrize(("name", "message"), [
    ("walk_postings", "do not hold each concept's sentences"),
    ("concept_postings", "do not hold each concept's chunks"),
])
def test_saved_postings_must_hold_each_concepts_entries(tmp_path: Path, name: str,
                                                        message: str) -> None:
    _, folder = saved_index(tmp_path)
    indptr, indices = _an_entry_moved(
        np.load(folder / f"{name}_indptr.npy", allow_pickle=False),
        np.load(folder / f"{name}_indices.npy", allow_pickle=False))
    _tamper(folder, f"{name}_indptr", lambda _: indptr)
    _tamper(folder, f"{name}_indices", lambda _: indices)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_verify_refuses_walk_units_that_obey_the_rules_but_differ(tmp_path: Path) -> None:
    """Which unit an entry is in rests on the checksum; ``verify`` derives it again."""
    index, folder = saved_index(tmp_path)
    _tamper(folder, "walk_entry_unit", np.zeros_like)  # every entry in the first unit
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.stats()["chunks"] == index.stats()["chunks"]
    with pytest.raises(CorruptIndexError, match="walk postings are not those"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)


# ------------------------------------------------ the concept links, column-major
def test_a_load_maps_the_concept_postings(tmp_path: Path) -> None:
    index, _ = saved_index(tmp_path)
    assert {f"{file}.npy" for file in _POSTINGS_FILES} <= set(
        read_manifest(tmp_path / "idx")["files"])
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    postings, built = loaded.state.graph.links_csc, index.state.graph.links_csc
    assert _mapped(postings.indices) and _mapped(postings.indptr)  # not transposed again
    assert postings.shape == built.shape
    for part in MATRIX_PARTS:
        np.testing.assert_array_equal(getattr(postings, part), getattr(built, part))
    assert _retrieved(loaded) == _retrieved(index)
    verified = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    assert _retrieved(verified) == _retrieved(index)


def test_a_save_from_before_the_concept_postings_were_kept_transposes_the_links(
        tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    _as_saved_without(folder, _POSTINGS_FILES)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert not _mapped(loaded.state.graph.links_csc.indices)
    assert_equal_graphs(loaded.state.graph, index.state.graph)
    assert _retrieved(loaded) == _retrieved(index)
    loaded.save(str(tmp_path / "again"))  # and the next save keeps them
    assert {f"{file}.npy" for file in _POSTINGS_FILES} <= set(
        read_manifest(tmp_path / "again")["files"])
    _refused_when_listed_in_part(index, tmp_path, "concept_postings_data.npy",
                                 r"all or none of concept_postings_indptr\.npy")


def test_concept_postings_that_break_a_rule_are_refused(tmp_path: Path) -> None:
    _, folder = saved_index(tmp_path)
    _tamper(folder, "concept_postings_indices", lambda a: a + 10_000)
    with pytest.raises(CorruptIndexError, match=r"must be in \[0, "):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_verify_refuses_concept_postings_with_the_right_counts_that_differ(
        tmp_path: Path) -> None:
    """Which chunks a column holds rests on the checksum; ``verify`` transposes the
    links again and compares."""
    index, folder = saved_index(tmp_path)
    indptr = np.load(folder / "concept_postings_indptr.npy", allow_pickle=False)
    chunks = len(index)

    def first_chunk_replaced(indices: np.ndarray) -> np.ndarray:
        out = indices.copy()
        column = list(out[indptr[0]:indptr[1]])
        column[0] = next(c for c in range(chunks) if c not in column)  # another chunk
        out[indptr[0]:indptr[1]] = sorted(column)
        return out

    _tamper(folder, "concept_postings_indices", first_chunk_replaced)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.stats()["chunks"] == index.stats()["chunks"]
    with pytest.raises(CorruptIndexError, match="concept postings are not the concept links"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)


# ------------------------------------------------ the concept vectors' fixed-point sums
def test_a_load_maps_the_saved_sums_and_a_refresh_updates_them(tmp_path: Path) -> None:
    index, _ = saved_index(tmp_path)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    sums = loaded.state.graph.concept_sums
    assert sums is not None and _mapped(sums)
    np.testing.assert_array_equal(sums, index.state.graph.concept_sums)
    loaded.add([CHUNKS[25]], ids=["c25"])
    loaded.delete(["c03"])
    assert_equal_graphs(loaded.state.graph,
                        derive_graph(loaded.state.corpus, loaded.config))


def test_sums_that_still_give_the_vectors_rest_on_the_checksum_and_verify_refuses_them(
        tmp_path: Path) -> None:
    """One unit more in a sum leaves its float32 vector the same bits: a default load
    takes it (its values rest on the checksum); verify sums the sentences and refuses."""
    index, folder = saved_index(tmp_path)

    def one_more(a: np.ndarray) -> np.ndarray:
        out = a.copy()  # the largest value: 2^-32 more is far under its float32 step
        out[np.unravel_index(int(np.argmax(np.abs(a))), a.shape)] += 1
        return out

    _tamper(folder, "concept_sums", one_more)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    np.testing.assert_array_equal(loaded.state.graph.vectors, index.state.graph.vectors)
    with pytest.raises(CorruptIndexError, match="sums are not the sums of their sentences"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)


def test_a_save_from_before_the_sums_were_kept_loads_and_its_refresh_sums_once(
        tmp_path: Path) -> None:
    index, folder = saved_index(tmp_path)
    _as_saved_without(folder, ["concept_sums", "summed_concepts"])
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.state.graph.concept_sums is None
    np.testing.assert_array_equal(loaded.state.graph.vectors, index.state.graph.vectors)
    verified = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    np.testing.assert_array_equal(verified.state.graph.concept_sums,
                                  index.state.graph.concept_sums)
    loaded.add([CHUNKS[25]], ids=["c25"])
    refreshed = loaded.state.graph
    assert refreshed.concept_sums is not None  # summed whole once, then kept
    assert_equal_graphs(refreshed, derive_graph(loaded.state.corpus, loaded.config))
    loaded.save(str(tmp_path / "again"))
    assert "concept_sums.npy" in read_manifest(tmp_path / "again")["files"]


def test_a_graph_with_no_concept_in_enough_sentences_keeps_no_sums(
        tmp_path: Path) -> None:
    """A sum takes 8 bytes a dimension: a concept in fewer than ``SUMS_MIN_SENTENCES``
    sentences keeps none. With the rule past every concept's count the graph keeps and
    saves none, and a refresh sums the changed concepts from their sentences instead,
    to the same bits."""
    rule = 100  # past any concept of these chunks (13 sentences at most), before and after
    # by hand, not monkeypatch: its undo runs after ``_sums_kept`` restores the default,
    # and would leave the rule at 0 for every later test module
    derived_module.SUMS_MIN_SENTENCES = rule
    index, _ = saved_index(tmp_path)
    graph, corpus = index.state.graph, index.state.corpus
    assert len(corpus.sentence_spans) and int(graph.sentence_counts.max()) < rule
    assert graph.concept_sums is None and graph.summed_concepts is None
    assert "concept_sums.npy" not in read_manifest(tmp_path / "idx")["files"]
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), verify=True)
    assert loaded.state.graph.concept_sums is None
    loaded.add([CHUNKS[25]], ids=["c25"])
    assert loaded.state.graph.concept_sums is None
    assert_equal_graphs(loaded.state.graph, derive_graph(loaded.state.corpus, loaded.config))


def test_sums_are_kept_for_the_concepts_in_enough_sentences(tmp_path: Path) -> None:
    """Rule 5 on this corpus keeps some concepts' sums and not others: exactly those in
    five sentences or more, each the exact fixed-point sum of its sentences. The save
    lists them, a load maps them, and a refresh (concepts crossing the line both ways)
    gives the derivation's."""
    derived_module.SUMS_MIN_SENTENCES = 5  # by hand: see the test above
    index, _ = saved_index(tmp_path)
    graph, corpus = index.state.graph, index.state.corpus
    counts = graph.sentence_counts
    summed = graph.summed_concepts
    assert summed is not None and 0 < len(summed) < len(graph.concepts)
    np.testing.assert_array_equal(summed, np.flatnonzero(counts >= 5))
    every, _ = concept_sums(link_concepts(corpus, index.config).sentence_concepts,
                            corpus.sentence_vectors)
    np.testing.assert_array_equal(graph.concept_sums, every[summed])
    assert "summed_concepts.npy" in read_manifest(tmp_path / "idx")["files"]
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert _mapped(loaded.state.graph.concept_sums)
    np.testing.assert_array_equal(loaded.state.graph.summed_concepts, summed)
    loaded.add([CHUNKS[25], CHUNKS[26]], ids=["c25", "c26"])
    loaded.delete(["c03", "c07"])
    after = loaded.state.graph
    assert not np.array_equal(after.summed_concepts, summed)  # the kept set moved
    assert_equal_graphs(after, derive_graph(loaded.state.corpus, loaded.config))


def test_a_save_that_kept_every_concepts_sum_loads_and_refreshes_to_the_rule(
        tmp_path: Path) -> None:
    """Saves of the seventeenth to twentieth rounds kept every concept's sum and listed
    none: they load as every concept's, and a refresh keeps those of the rule."""
    index, folder = saved_index(tmp_path)  # rule 0: every concept's sum
    _as_saved_without(folder, ["summed_concepts"])
    derived_module.SUMS_MIN_SENTENCES = 5  # by hand: see the tests above
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    graph = loaded.state.graph
    np.testing.assert_array_equal(graph.summed_concepts, np.arange(len(graph.concepts)))
    np.testing.assert_array_equal(graph.concept_sums, index.state.graph.concept_sums)
    loaded.add([CHUNKS[25]], ids=["c25"])
    refreshed = loaded.state.graph
    assert refreshed.summed_concepts is not None
    assert len(refreshed.summed_concepts) < len(refreshed.concepts)
    assert_equal_graphs(refreshed, derive_graph(loaded.state.corpus, loaded.config))


def test_a_save_listing_summed_concepts_without_their_sums_is_refused(tmp_path: Path) -> None:
    _, folder = saved_index(tmp_path)
    _as_saved_without(folder, ["concept_sums"])
    with pytest.raises(CorruptIndexError, match="lists summed concepts but holds no concept sums"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
