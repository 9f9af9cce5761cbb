"""A build whose batches are split, embedded and counted in other processes or on a cluster.

The clusters are real: Dask's scheduler and two worker processes on loopback, and a
local Ray cluster, each started by the test and reached through the same client code
as a remote cluster.
"""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import distributed
import numpy as np
import pytest

from shared_core import ConceptGraphConfig, HashingEmbedder
from shared_core.embeddings import CachedEmbedder, EmbeddingCache
from shared_core.index import ConceptGraphIndex
from shared_core.ray_executor import RayExecutor
from tests.shared_core.test_index_state import CONFIGS, POOL, assert_same_index, ids_for

loopback = pytest.mark.allow_hosts(["127.0.0.1"])
DIM = 64


def built(config: ConceptGraphConfig, **kwargs: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL), embedder=HashingEmbedder(DIM),
                                        config=config, batch_size=3, **kwargs)  # type: ignore[arg-type]


def assert_equal_builds(sharded: ConceptGraphIndex, local: ConceptGraphIndex) -> None:
    """Same chunks, vectors, terms, concepts and edges; PageRank within 1e-6."""
    a, b = sharded.state, local.state
    assert a.corpus.ids == b.corpus.ids and a.corpus.terms == b.corpus.terms
    np.testing.assert_array_equal(a.corpus.sentence_vectors, b.corpus.sentence_vectors)
    assert (a.corpus.sentence_terms != b.corpus.sentence_terms).nnz == 0
    assert a.graph.concepts == b.graph.concepts
    assert sharded.edges == local.edges
    np.testing.assert_allclose(a.graph.rank, b.graph.rank, rtol=0, atol=1e-6)
    assert_same_index(sharded, local)


@loopback
@pytest.mark.parametrize("name", ["default", "direct_units", "bigrams_exact"])
def test_a_build_sharded_over_a_dask_cluster_equals_a_local_build(name: str) -> None:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as cluster, \
            distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as tasks:
            sharded = built(CONFIGS[name], executor=client.get_executor())
        ran = [t for t in tasks.data if t["key"].startswith("prepare_shard")]
    # ten chunks in batches of three: four batches, each prepared on a worker
    assert len(ran) == 4
    assert_equal_builds(sharded, built(CONFIGS[name]))


def test_a_build_sharded_over_processes_equals_a_local_build() -> None:
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        sharded = built(CONFIGS["units"], executor=pool)
    assert_equal_builds(sharded, built(CONFIGS["units"]))


class FailsOnSecondBatch(HashingEmbedder):
    """An embedder that fails inside a worker, on the batch holding 'Hopper and Turing'."""

    def embed(self, texts: list[str]) -> np.ndarray:  # type: ignore[override]
        if any("Hopper and Turing" in t for t in texts):
            raise RuntimeError("the embedding service is down")
        return super().embed(texts)


def test_a_worker_failure_raises_and_publishes_nothing() -> None:
    index = ConceptGraphIndex.from_texts(POOL[:3], ids=ids_for(POOL[:3]),
                                         embedder=FailsOnSecondBatch(DIM))
    before = index.state
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool, \
            pytest.raises(RuntimeError, match="the embedding service is down"):
        index.add(POOL[3:], ids=ids_for(POOL[3:]), batch_size=2, executor=pool)
    assert index.state is before and len(index) == 3


def test_executor_must_be_an_executor() -> None:
    with pytest.raises(TypeError, match=r"executor must be a concurrent.futures.Executor.*got "
                                        "str"):
        built(CONFIGS["default"], executor="dask://scheduler:8786")


def test_an_embedding_cache_travels_as_its_file(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    embedder = CachedEmbedder(HashingEmbedder(DIM), cache)
    first = embedder.embed(["Ada wrote a program."])
    copy = pickle.loads(pickle.dumps(embedder))
    assert copy.cache is not cache and copy.cache.path == cache.path
    assert len(copy.cache) == 1  # the same file, reopened
    embedded = copy.embedded_texts
    np.testing.assert_array_equal(copy.embed(["Ada wrote a program."]), first)
    assert copy.embedded_texts == embedded  # served from the shared file, not embedded again


@pytest.mark.slow
def test_minilm_travels_as_how_to_load_it() -> None:
    from shared_core import minilm_embedder

    model = minilm_embedder(precision="fp32")
    sent = pickle.dumps(model)
    assert len(sent) < 10_000  # no weights inside
    copy = pickle.loads(sent)
    assert pickle.loads(sent) is copy  # a worker loads the model once for all its tasks
    assert copy.model_id == model.model_id
    np.testing.assert_allclose(copy.embed(["Ada wrote a program."]),
                               model.embed(["Ada wrote a program."]), atol=1e-6)


@loopback
def test_a_build_sharded_over_a_ray_cluster_equals_a_local_build() -> None:
    with RayExecutor(num_cpus=2, include_dashboard=False, log_to_driver=False) as ray_pool:
        sharded = built(CONFIGS["direct_units"], executor=ray_pool)
    assert_equal_builds(sharded, built(CONFIGS["direct_units"]))
