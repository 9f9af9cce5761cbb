"""Baselines worked by hand: best-sentence dense retrieval and mean sentence vectors."""

from __future__ import annotations

import numpy as np

from benchmarks.baselines import BestSentenceRetriever, mean_sentence_vectors, sentence_vectors
from shared_core.embeddings import HashingEmbedder


def test_best_sentence_retriever_by_hand() -> None:
    # unit 0 = sentence 0, unit 1 = sentences 1 and 2; q = (.8, .6):
    #   unit 0: .8;  unit 1: max(.6, .6 * .8 + .8 * .6 = .96) = .96  -> unit 1 first
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    retriever = BestSentenceRetriever(vectors, np.array([0, 1]), np.array([5, 7]))
    q = np.array([0.8, 0.6], dtype=np.float32)
    assert retriever.retrieve("", q, 12) == [1, 0]
    assert retriever.retrieve("", q, 7) == [1]      # unit 0 (5 tokens) no longer fits
    assert retriever.retrieve("", q, 6) == [0]      # unit 1 is skipped, unit 0 fits


def test_sentence_vectors_and_their_mean() -> None:
    embedder = HashingEmbedder(64)
    texts = ["Ada wrote a program. Babbage built an engine.", "One sentence only"]
    vectors, starts = sentence_vectors(texts, embedder)
    assert starts.tolist() == [0, 2] and len(vectors) == 3
    expected = embedder.embed(["Ada wrote a program.", "Babbage built an engine."]).sum(axis=0)
    means = mean_sentence_vectors(texts, embedder)
    np.testing.assert_allclose(means[0], expected / np.linalg.norm(expected), atol=1e-6)
    np.testing.assert_allclose(means[1], embedder.embed(["One sentence only"])[0], atol=1e-6)
