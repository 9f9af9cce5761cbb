"""The concept-search benchmark: inverted lists and HNSW against the exact direct concepts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.concept_search import (
    InvertedLists,
    index_path,
    main,
    measure,
    recall,
    spherical_kmeans,
    tied_recall,
)
from tests.benchmarks.dev_sets import write_dev_set
from tests.shared_core.test_store import TEXTS


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# two tight groups of 2-d concepts, around x and around y; ids are not positions
VECTORS = np.stack([unit(1, 0.1), unit(0.1, 1), unit(1, 0.2), unit(0.2, 1), unit(1, 0)])
IDS = np.array([10, 11, 12, 13, 14])


def test_inverted_lists_group_concepts_by_nearest_centroid_and_scan_only_probed_lists() -> None:
    lists = InvertedLists(VECTORS, IDS, np.stack([unit(1, 0), unit(0, 1)]))
    assert lists.bounds.tolist() == [0, 3, 5]  # 10, 12, 14 near x; 11, 13 near y
    assert lists.ids.tolist() == [10, 12, 14, 11, 13]
    # a query near y scans y's list only: its two concepts, the closer first
    ids, scanned = lists.search(unit(0.15, 1), k=3, nprobe=1)
    assert ids.tolist() == [13, 11] and scanned == 2
    # every list probed: the exact order over all five
    ids, scanned = lists.search(unit(1, 0.15), k=5, nprobe=2)
    assert scanned == 5
    assert ids.tolist() == IDS[np.argsort(-(VECTORS @ unit(1, 0.15)))].tolist()


def test_spherical_kmeans_finds_the_two_groups() -> None:
    centroids = spherical_kmeans(VECTORS, 2)
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-6)
    groups = {tuple(sorted(IDS[np.argmax(VECTORS @ centroids.T, axis=1) == c].tolist()))
              for c in range(2)}
    assert groups == {(10, 12, 14), (11, 13)}


def test_recall_is_the_share_of_exact_concepts_found() -> None:
    assert recall([np.array([1, 2, 3]), np.array([7])], [np.array([1, 2, 4]), np.array([7, 8])]
                  ) == pytest.approx(3 / 5)


def test_a_found_concept_tied_with_the_last_exact_one_counts_in_the_tied_recall() -> None:
    sims = np.array([0.0, 0.9, 0.5, 0.5, 0.4])
    exact = [np.array([1, 2])]  # the scan takes 2 of the tied 2 and 3: the lower position
    assert tied_recall([np.array([1, 3])], exact, [sims]) == 1.0  # 3 ties the scan's last
    assert recall([np.array([1, 3])], exact) == 0.5
    assert tied_recall([np.array([1, 4])], exact, [sims]) == 0.5  # 4 is less similar


def test_the_index_path_finds_the_scans_concepts_with_a_beam_past_every_row() -> None:
    from types import SimpleNamespace

    from shared_core.search.concepts import BEAM, ConceptHnsw

    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((2 * BEAM, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    usable = np.flatnonzero(np.arange(len(vectors)) % 5 != 0)  # a fifth link no unit
    graph = SimpleNamespace(vectors=vectors, unit_linked_concepts=usable,
                            concept_hnsw=ConceptHnsw.build(vectors, usable))
    queries = rng.standard_normal((10, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    rows = index_path(graph, queries, 10, per_direct=[2, 4], beams=[4 * BEAM])
    assert [(r["per_direct"], r["beam"], r["candidates"]) for r in rows] == [
        (2, 4 * BEAM, 20), (4, 4 * BEAM, 40)]
    # the beam visits every row; the 8-bit order of 16-d rows keeps the best 10 in 20
    assert all(r["recall"] == r["recall_ties_found"] == 1.0 for r in rows)


def test_probing_every_list_or_a_beam_past_every_concept_finds_the_exact_ones() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    usable = np.flatnonzero(np.arange(300) % 3 != 0)  # a third link no unit
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    report = measure(vectors, usable, queries, k=10, lists=[8], nprobes=[2, 8], beams=[400])
    few, every = report["ivf"]
    assert every["recall"] == 1.0 and every["scanned_share"] == 1.0
    assert few["scanned_share"] < 1.0 and few["recall"] <= 1.0
    assert report["hnsw"][0]["recall"] == 1.0
    assert (report["concepts"], report["usable"], report["top_k"]) == (300, 200, 10)


def test_a_dev_set_is_indexed_and_asked_its_questions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dev_set(data / "tiny", [{"id": f"p{i}", "title": "", "text": t}
                                  for i, t in enumerate(TEXTS)],
                  [{"id": "q1", "question": "Who designed the analytical engine?",
                    "answers": ["Babbage"]}])
    out = tmp_path / "search.json"
    main(["--dataset", "tiny", "--data", str(data), "--embedder", "hashing",
          "--cache", str(tmp_path / "cache.sqlite"), "--lists", "2", "--nprobe", "2",
          "--ef", "64", "--index-ef-construction", "40", "--out", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["queries"] == 1 and report["embedder"].startswith("hashing")
    # a graph built afresh with the beam asked for: it too proposes every concept
    (built,) = report["built_graphs"]
    assert built["ef_construction"] == 40 and built["context_kept"] == 1.0
    assert built["self_recall"] == 1.0 and built["self_check_s"] >= 0
    assert [row["recall"] for row in built["index_path"]] == [1.0]
    assert report["ivf"][0]["recall"] == 1.0 and report["hnsw"][0]["recall"] == 1.0
    # the graph proposes every concept of so small an index: the context is the scan's
    assert report["context_kept_by_concept_hnsw"] == 1.0


def test_dev_sets_joined_by_plus_are_one_index_asked_all_their_questions(tmp_path: Path
                                                                          ) -> None:
    from benchmarks.concept_search import dataset_index
    from shared_core import HashingEmbedder

    data = tmp_path / "data"
    write_dev_set(data / "one", [{"id": f"p{i}", "title": "", "text": t}
                                 for i, t in enumerate(TEXTS[:3])],
                  [{"id": "q1", "question": "Who designed the engine?", "answers": ["B"]}])
    # its first passage is the other set's third: indexed once, under the first set's id
    write_dev_set(data / "two", [{"id": f"p{i}", "title": "", "text": t}
                                 for i, t in enumerate(TEXTS[2:])],
                  [{"id": "q1", "question": "Who wrote the compiler?", "answers": ["H"]}])
    index, asked = dataset_index("one+two", data, HashingEmbedder(64))
    assert index.chunk_ids == ["one:p0", "one:p1", "one:p2", "two:p1", "two:p2"]
    assert asked.texts == ["Who designed the engine?", "Who wrote the compiler?"]
