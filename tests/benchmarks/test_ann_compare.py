"""The ANN comparison on a tiny clustered set: exact is exact, every library finds neighbours."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from benchmarks.ann_compare import (
    CONFIGS,
    compare,
    crossover_rows,
    make_backends,
    recall,
    rescore,
    table,
)


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def easy() -> tuple[np.ndarray, np.ndarray]:
    """2,000 unit vectors in 200 tight clusters of 10; queries are 30 perturbed cluster centres.

    Each query's top 10 is its cluster, far ahead of the 11th: an easy set.
    """
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((200, 384))
    vectors = unit(np.repeat(centres, 10, axis=0) + 0.3 * rng.standard_normal((2000, 384)))
    queries = unit(centres[rng.choice(200, 30, replace=False)]
                   + 0.1 * rng.standard_normal((30, 384)))
    return vectors, queries


@pytest.fixture(scope="module")
def result(easy: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    vectors, queries = easy
    return compare("easy", vectors, queries, make_backends(list(CONFIGS), len(vectors), 64),
                   ks=(10,), threads=2, target=0.9)


def test_exact_baseline_has_recall_one(result: dict[str, Any]) -> None:
    exact = result["configs"][0]
    assert exact["config"] == "exact-f32"
    assert exact["k"]["10"]["recall"] == 1.0


def test_every_ann_config_finds_the_neighbours(result: dict[str, Any]) -> None:
    configs = result["configs"][1:]
    assert [c["config"].split("-")[0] for c in configs] == ["faiss"] * 5 + ["usearch"] * 6
    for config in configs:
        row = config["k"]["10"]
        assert row["recall"] >= 0.9, (config["config"], row)
        assert row["value"] in [int(v) for v in row["grid"]]
        assert row["candidates"] == 10 * config["rerank"]
        assert config["disk_bytes"] > 0 and config["build_s"] >= 0
        assert config["load_same_results"] is True, config["config"]


def test_report_has_the_fields(result: dict[str, Any]) -> None:
    report = json.loads(json.dumps({"sources": [result]}))
    source = report["sources"][0]
    assert source["rows"] == 2000 and source["dim"] == 384 and source["queries"] == 30
    assert source["float16_store_bytes"] == 2000 * 384 * 2
    for config in source["configs"]:
        assert {"config", "library", "params", "build_s", "build_threads", "disk_bytes",
                "memory_bytes", "save_s", "load_s", "mmap_load_s", "remove", "k"} <= set(config)
        assert {"knob", "value", "candidates", "recall", "grid", "ms", "search_ms"} <= set(
            config["k"]["10"])
        assert config["k"]["10"]["ms"]["p50"] <= config["k"]["10"]["ms"]["p95"]
    usearch = [c for c in source["configs"] if c["library"] == "usearch"]
    assert all(c["mmap_load_same_results"] and c["remove"] == "ok" for c in usearch)
    assert "| easy | 2000 | exact-f32 |" in table(report)


def test_recall_counts_ties_and_rescoring_orders_exactly() -> None:
    vectors = unit(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]))
    query = np.array([1.0, 0.0], dtype=np.float32)
    kth = np.array([1.0], dtype=np.float32)  # rows 0 and 1 tie for the best
    assert recall(vectors, query[None], kth, [np.array([1])], 1) == 1.0
    assert recall(vectors, query[None], kth, [np.array([3])], 1) == 0.0
    order = rescore(vectors.astype(np.float16), query, np.array([2, 3, 0, -1]), 2)
    assert order.tolist() == [0, 3]


def test_crossover_interpolates_log_log() -> None:
    assert crossover_rows([(10_000, 1.0), (100_000, 10.0)], 5.0) == 50_000
    assert crossover_rows([(10_000, 1.0), (100_000, 2.0)], 5.0) is None


def test_appending_a_run_replaces_only_the_configs_it_measured() -> None:
    from benchmarks.ann_compare import merge_source

    def source(rows: int, *configs: tuple[str, float]) -> dict[str, Any]:
        return {"source": "s", "rows": rows,
                "configs": [{"config": c, "build_s": b} for c, b in configs]}

    earlier = [source(10, ("exact-f32", 0), ("a", 1), ("b", 2)), source(20, ("exact-f32", 0))]
    merged = merge_source(earlier, source(10, ("exact-f32", 0), ("b", 3), ("c", 4)))
    assert [s["rows"] for s in merged] == [20, 10]
    assert merged[1]["configs"] == [{"config": "exact-f32", "build_s": 0},
                                    {"config": "a", "build_s": 1}, {"config": "b", "build_s": 3},
                                    {"config": "c", "build_s": 4}]
