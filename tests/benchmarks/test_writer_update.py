"""The large-update benchmark: both indexes over one store, the writer's reads counted."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.scale import Queries, TimedStore, passages
from benchmarks.writer_update import large_update_figures
from shared_core import ConceptGraphIndex, HashingEmbedder, QdrantStore
from shared_core.store import index_folder

POOL = [f"Sentence number {i} is here." for i in range(20)]


def test_both_indexes_make_the_same_large_update_and_only_the_writer_reads_rows(
        tmp_path: Path) -> None:
    embedder = HashingEmbedder(32)
    store = TimedStore(QdrantStore(str(tmp_path / "qdrant"), "t"))
    ids, texts = passages(POOL, 20, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    index.save(str(tmp_path / "idx"))
    saved_keys = set(index.state.stored_rows().keys_of(range(len(index))))
    asked = Queries(POOL[:5], np.asarray(embedder.embed(POOL[:5]), dtype=np.float32))
    extra_ids, extra_texts = passages(POOL, 6, seed=2)  # 30 %
    figures = large_update_figures(tmp_path / "idx", embedder, store, asked, extra_texts,
                                   extra_ids)
    assert figures["writer_context_vs_holds"] == 1.0
    assert figures["holds"]["rows_read_add"] == figures["holds"]["rows_read_delete"] == 0
    new_rows = len(ConceptGraphIndex.from_texts(extra_texts, embedder=embedder)
                   .state.corpus.sentence_spans)
    assert figures["writer"]["rows_read_add"] >= new_rows  # it reads its new rows back
    assert figures["writer"]["rows_read_delete"] > 0
    # the writer's save holds no vector, and its deletes have left the store
    assert not (index_folder(tmp_path / "writer") / "sentence_embeddings.npy").exists()
    assert set(store.list_keys()) == saved_keys
