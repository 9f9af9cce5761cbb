"""The update-cost benchmark on a small saved index: what it adds, and the segments it reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.scale import Queries
from benchmarks.update_cost import measure_index
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from tests.shared_core.test_store import TEXTS

DIM = 64


def test_an_add_and_delete_on_a_saved_hnsw_index_are_measured(tmp_path: Path) -> None:
    embedder = HashingEmbedder(DIM)
    index = ConceptGraphIndex.from_texts(TEXTS, embedder=embedder,
                                         config=ConceptGraphConfig(vector_index="hnsw"))
    index.save(str(tmp_path / "idx"))
    rows = len(index.state.graph.ann)  # type: ignore[arg-type]
    pool = [f"Sentence number {i} names the engine of Babbage." for i in range(30)]
    asked = Queries(["Who designed the engine?"], embedder.embed(["Who designed the engine?"]))
    row = measure_index(tmp_path / "idx", pool, asked, share=0.2, settled={},
                        cycles=2)
    added = round(len(TEXTS) * 0.2)  # few enough for a refresh, not a rebuild
    assert (row["chunks"], row["added"]) == (len(TEXTS), added)
    assert row["segments_loaded"] == [rows]
    # each passage is 3-6 one-sentence pool entries: one new segment of their rows
    first, later = row["segments_after_add"]
    assert first == rows and 3 * added <= later <= 6 * added
    # 3 or more dead rows of at most 16 pass MAX_DEAD_ROWS (a fifth): rebuilt from the live
    assert row["segments_after_delete"] == [rows]
    for update in ("add", "delete"):
        assert row[update]["heap_peak_mb"] >= row[update]["heap_after_mb"] > 0
    assert row["query_after_add"]["query_ms_p50"] > 0
    # two more adds and deletes of the same passages, each timed
    assert [len(row["cycles"][k]) for k in ("add_s", "delete_s")] == [2, 2]
    assert all(t > 0 for k in ("add_s", "delete_s") for t in row["cycles"][k])
    assert row["concept_graph_loaded"] is None  # concept_search="exact" holds no graph


def updated_with(tmp_path: Path, concept_search: str) -> dict[str, Any]:
    """The benchmark's row for a 20 % add and delete on the sample saved with the default
    config and loaded with ``concept_search``."""
    embedder = HashingEmbedder(DIM)
    ConceptGraphIndex.from_texts(TEXTS, embedder=embedder).save(str(tmp_path / "idx"))
    pool = [f"Sentence number {i} names the engine of Babbage." for i in range(30)]
    asked = Queries(["Who designed the engine?"], embedder.embed(["Who designed the engine?"]))
    return measure_index(tmp_path / "idx", pool, asked, share=0.2,
                         settled={"concept_search": concept_search})


def test_the_concept_graph_is_reported_through_the_updates(tmp_path: Path) -> None:
    row = updated_with(tmp_path, "hnsw")
    # the save holds none: built after the load, timed, over every concept linking a unit
    assert row["concept_graph_build"]["s"] >= 0
    loaded = row["concept_graph_loaded"]
    assert loaded["beside"] == 0 and loaded["live_rows"] == loaded["rows"] > 0
    after_add, after_delete = row["concept_graph_after_add"], row["concept_graph_after_delete"]
    # the added chunk brings four concepts and moves two past MAX_ROW_DRIFT (their rows
    # dropped): six beside the kept graph, under MAX_BESIDE, so the graph itself is kept
    rows = loaded["rows"]
    assert after_add == {**loaded, "live_rows": rows - 2, "beside": 6,
                         "beside_share": round(6 / (rows + 4), 4),
                         "dead_share": round(2 / rows, 4), "rebuilt": False}
    # the delete takes the four away again; the two moved ones stay beside it
    assert after_delete == {**loaded, "live_rows": rows - 2, "beside": 2,
                            "beside_share": round(2 / rows, 4),
                            "dead_share": round(2 / rows, 4), "rebuilt": False}


def test_the_concept_codes_are_reported_and_carried_through_the_updates(tmp_path: Path) -> None:
    row = updated_with(tmp_path, "codes")
    assert row["concept_graph_loaded"] is None
    loaded = row["concept_codes_loaded"]  # coded by the first query after the load
    assert loaded["coded"] > 0 and loaded["beside"] == 0
    for update in ("add", "delete"):
        after = row[f"concept_codes_after_{update}"]
        assert after["carried"] and not after["trained_again"]
        assert row[f"first_query_after_{update}_ms"] > 0
    # the delete takes the added chunk's concepts away again, coded or beside
    after_add, after_delete = row["concept_codes_after_add"], row["concept_codes_after_delete"]
    assert after_add["coded"] + after_add["beside"] > loaded["coded"]
    assert after_add["afresh_s"] >= 0 and "afresh_s" not in after_delete
    assert after_delete["coded"] + after_delete["beside"] == loaded["coded"]
