"""A small corpus gives a concept graph without edges: the index, cost report and CLI say so.

Issue #12: five short files built with the default ``theta_co=3`` gave 0 edges and
nothing said so, though without edges every concept has the same PageRank.

The five files below each hold one sentence of two content words, and no word is in
two files. So the index has 10 concepts, a pair of concepts shares at most 1 chunk
(< 3: no edge by default), and the 5 pairs that share one (the two words of a file)
have cosine 1: both concept vectors are that file's one sentence (Eq. 1). With
``theta_co=1`` the graph has exactly those 5 edges.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.cli import main
from shared_core.select import CostReport

FILES = {"a.txt": "Zebras gallop.", "b.txt": "Lions hunt.", "c.txt": "Owls hoot.",
         "d.txt": "Frogs croak.", "e.txt": "Bees buzz."}
NO_EDGES = "the concept graph has no edges"


def small_index(config: ConceptGraphConfig | None = None) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(list(FILES.values()), ids=list(FILES),
                                        embedder=HashingEmbedder(64), config=config)


def test_stats_warn_about_a_graph_without_edges_and_name_the_fix() -> None:
    index = small_index()
    stats = index.stats()
    assert (stats["concepts"], stats["edges"], stats["isolated_concepts"]) == (10, 0, 10)
    [warning] = stats["warnings"]
    assert warning.startswith(f"{NO_EDGES}: no two of its 10 concepts share theta_co=3 chunks "
                              "with cosine >= theta_sem=0.65")
    assert warning.endswith("lower theta_co: theta_co=1 gives 5 edges (index.reconfigured("
                            "theta_co=1), or conceptgraph build --set theta_co=1)")
    # the advice holds: 5 edges, and nothing left to warn about
    fixed = index.reconfigured(theta_co=1).stats()
    assert (fixed["edges"], fixed["isolated_concepts"], fixed["warnings"]) == (5, 0, [])


def test_stats_name_theta_sem_when_the_cosine_filter_removed_every_pair() -> None:
    # one chunk, two one-word sentences: the concepts share the chunk (Co = 1) and their
    # vectors are the two sentences' hashing vectors, one signed basis vector each
    emb = HashingEmbedder(64)
    zebras, lions = emb.embed(["Zebras.", "Lions."])
    assert float(zebras @ lions) == 0.0  # different buckets: cosine 0
    index = ConceptGraphIndex.from_texts(["Zebras. Lions."], embedder=emb,
                                         config=ConceptGraphConfig(theta_co=1))
    [warning] = index.stats()["warnings"]
    assert warning.endswith("lower theta_sem: the closest concepts sharing a chunk have cosine "
                            "0.00 (conceptgraph build --set theta_sem=0)")
    assert index.reconfigured(theta_sem=0.0).stats()["edges"] == 1
    # under theta_co=3 both thresholds must move
    strict = index.reconfigured(theta_co=3).stats()["warnings"][0]
    assert strict.endswith("(conceptgraph build --set theta_co=1 --set theta_sem=0)")


def test_stats_say_when_no_two_concepts_share_a_chunk() -> None:
    # one extracted concept per chunk, linked to that chunk only: no pair to join
    index = small_index(ConceptGraphConfig(concepts_per_chunk=1, concept_links="extracted"))
    [warning] = index.stats()["warnings"]
    assert warning.endswith("no two concepts share a chunk: raise concepts_per_chunk")


def test_no_warning_for_an_empty_or_one_concept_index() -> None:
    assert ConceptGraphIndex(HashingEmbedder(64)).stats()["warnings"] == []
    one = ConceptGraphIndex.from_texts(["Zebras."], embedder=HashingEmbedder(64))
    assert one.stats()["concepts"] == 1 and one.stats()["warnings"] == []


def test_cost_report_warns_when_the_ranking_graph_has_no_edges() -> None:
    plain = CostReport(kappa=0.5, chunks_total=5, chunks_kept=2, tokens_total=25, tokens_kept=8,
                       by="tokens")
    # existing callers, who do not say, get the report they had
    assert plain.graph_edges is None and plain.warnings == ()
    assert "warning" not in plain.summary()
    assert plain.to_dict()["graph_edges"] is None and plain.to_dict()["warnings"] == []
    connected = CostReport(0.5, 5, 2, 25, 8, by="tokens", graph_edges=5)
    assert connected.warnings == () and "warning" not in connected.summary()
    flat = CostReport(0.5, 5, 2, 25, 8, by="tokens", graph_edges=0)
    [warning] = flat.warnings
    assert flat.summary() == (
        "core chunks at kappa=0.5 of tokens: kept 2/5 chunks, 8/25 tokens; KG-extraction "
        "input ~8 tokens instead of 25 (68.0% saved); warning: " + warning)
    assert warning.startswith(f"{NO_EDGES}, so every concept has the same PageRank")
    assert "theta_co=1" in warning and "conceptgraph build --set theta_co=1" in warning
    assert flat.to_dict()["warnings"] == [warning] and flat.to_dict()["graph_edges"] == 0


@pytest.fixture
def five_files(tmp_path: Path) -> Path:
    folder = tmp_path / "five"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


def test_cli_build_stats_and_select_print_the_warning(
        five_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = str(tmp_path / "idx")
    assert main(["build", str(five_files), "--out", index_dir, "--embedder", "hashing",
                 "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "edges                  0" in out
    assert err.startswith(f"conceptgraph: warning: {NO_EDGES}: no two of its 10 concepts")
    assert "theta_co=1 gives 5 edges" in err and "--set theta_co=1" in err

    assert main(["stats", index_dir]) == 0
    out, err = capsys.readouterr()
    assert "warnings" not in out  # the table holds the sizes; the warning goes to stderr
    assert err.count("conceptgraph: warning: ") == 1 and "theta_co=1 gives 5 edges" in err

    assert main(["select", index_dir, "--kappa", "0.5"]) == 0
    out, err = capsys.readouterr()
    assert "construction-cost reduction" in out
    assert err == (f"conceptgraph: warning: {NO_EDGES}, so every concept has the same "
                   "PageRank and the ranking uses no graph structure: lower theta_co, e.g. "
                   "theta_co=1 (index.reconfigured(theta_co=1), or conceptgraph build --set "
                   "theta_co=1)\n")


def test_cli_following_the_advice_silences_the_warning(
        five_files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = str(tmp_path / "idx")
    assert main(["build", str(five_files), "--out", index_dir, "--embedder", "hashing",
                 "--quiet", "--set", "theta_co=1"]) == 0
    out, err = capsys.readouterr()
    assert "edges                  5" in out and err == ""
    assert main(["stats", index_dir]) == 0 and capsys.readouterr().err == ""
    assert main(["select", index_dir, "--kappa", "0.5"]) == 0 and capsys.readouterr().err == ""


def test_the_index_records_its_graph_in_the_selection_report() -> None:
    # default theta_co=3: no edges, and every selector built on the index hears of it
    report = small_index().select(0.5).report
    assert report.graph_edges == 0 and NO_EDGES in report.summary()
    # theta_co=1: the five in-file pairs are edges (module docstring), no warning
    connected = small_index(ConceptGraphConfig(theta_co=1)).select(0.5).report
    assert connected.graph_edges == 5 and connected.warnings == ()
    # KNN and random selection do not rank by the concept graph: nothing to say
    assert small_index().select(0.5, method="knn").report.graph_edges is None
