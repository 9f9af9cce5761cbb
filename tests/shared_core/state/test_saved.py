"""A saved graph restores to the derived one, and every saved part that disagrees is caught."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.faults import rehash
from shared_core import ConceptGraphIndex, HashingEmbedder
from shared_core.graph import edges as edges_module
from shared_core.state import derive_graph
from shared_core.store import CorruptIndexError, index_folder, read_manifest
from tests.shared_core.state.test_refresh import CHUNKS, assert_equal_graphs
from tests.shared_core.test_index_state import CONFIGS

DIM = 64


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
    assert manifest["graph"] == {"concepts": len(index.state.graph.concepts),
                                 "edges": len(index.state.graph.edges)}

    count = edges_module.cooccurrence

    def no_edges(links: sp.csr_matrix) -> sp.csr_matrix:
        if links.shape[0]:  # an empty index is derived first, then replaced
            raise AssertionError("a load with a saved graph must not count co-occurrences")
        return count(links)

    monkeypatch.setattr(edges_module, "cooccurrence", no_edges)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    monkeypatch.undo()
    assert_equal_graphs(loaded.state.graph, derive_graph(loaded.state.corpus, CONFIGS[name]))
    np.testing.assert_array_equal(loaded.state.graph.rank, index.state.graph.rank)


def _tamper(folder: Path, name: str, change: object) -> None:
    array = np.load(folder / f"{name}.npy", allow_pickle=False)
    array = change(array)  # type: ignore[operator]
    np.save(folder / f"{name}.npy", array, allow_pickle=False)
    rehash(folder, f"{name}.npy")


def _raise_first(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[0] += 1_000
    return out


@pytest.mark.parametrize(("name", "change", "message"), [
    ("graph_edge_target", _raise_first, "join two of the"),
    ("graph_edge_source", lambda a: a[::-1].copy(), "sorted"),
    ("graph_edge_cooccurrence", _raise_first, "exceeds the chunks"),
    ("graph_edge_cooccurrence", lambda a: a * 0, "below theta_co"),
    ("graph_rank", lambda a: np.roll(a, 1), "PageRank"),
    ("graph_rank", lambda a: -a, "PageRank"),
])
def test_a_saved_graph_that_disagrees_with_its_chunks_is_refused(
        tmp_path: Path, name: str, change: object, message: str) -> None:
    _, folder = saved_index(tmp_path)
    _tamper(folder, name, change)
    with pytest.raises(CorruptIndexError, match=message):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_an_edge_moved_to_a_dissimilar_pair_fails_theta_sem(tmp_path: Path) -> None:
    """theta_sem 0.3: retarget an edge to a pair whose recomputed cosine is below it."""
    config = CONFIGS["default"].to_dict() | {"theta_sem": 0.3}
    from shared_core import ConceptGraphConfig

    index = ConceptGraphIndex.from_texts(CHUNKS[:20], ids=[f"c{i:02d}" for i in range(20)],
                                         embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig.from_dict(config))
    graph = index.state.graph
    cos = graph.vectors[0] @ graph.vectors.T
    far = int(np.flatnonzero(cos[1:] < 0.3)[-1]) + 1  # concept 0 and ``far`` are not similar
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    first_from_0 = int(np.flatnonzero(graph.edges.source == 0)[0])
    assert graph.edges.target[first_from_0] != far

    def retarget(a: np.ndarray) -> np.ndarray:
        out = a.copy()
        out[first_from_0] = far
        return out

    _tamper(folder, "graph_edge_target", retarget)
    with pytest.raises(CorruptIndexError, match=r"theta_co or theta_sem|sorted"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_a_graph_entry_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    _, folder = saved_index(tmp_path)
    import json

    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["graph"]["edges"] += 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="shape"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_an_index_saved_without_a_graph_derives_it(tmp_path: Path) -> None:
    import json

    index, folder = saved_index(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["graph"]  # as saves before this change wrote it
    (folder / "manifest.json").write_text(json.dumps(manifest))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert_equal_graphs(loaded.state.graph, index.state.graph)
