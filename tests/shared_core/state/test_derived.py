"""The first stage of a derivation: concepts and the chunks and sentences they link."""

from __future__ import annotations

import numpy as np
import pytest

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.state.derived import link_concepts
from tests.shared_core.state.test_refresh import CHUNKS


@pytest.mark.parametrize("mode", ["contains", "extracted"])
def test_sentences_link_the_concepts_they_contain_within_linked_chunks(mode: str) -> None:
    """Eq. 1's sentence sets: a sentence links a concept it contains when its chunk links it.
    Under "contains" every chunk links what its sentences contain, so that is all of them."""
    config = ConceptGraphConfig(concept_links=mode, concepts_per_chunk=3)  # type: ignore[arg-type]
    index = ConceptGraphIndex.from_texts(CHUNKS, embedder=HashingEmbedder(64), config=config)
    corpus = index.state.corpus
    found = link_concepts(corpus, config)
    contains = corpus.sentence_terms[:, found.concept_terms].toarray() > 0
    chunk_links = found.links.toarray()[corpus.sentence_chunk()] > 0
    got = found.sentence_concepts
    assert got.has_canonical_format
    np.testing.assert_array_equal(got.toarray(), (contains & chunk_links).astype(np.float32))
    if mode == "contains":
        np.testing.assert_array_equal(got.toarray() > 0, contains)
    else:  # a chunk's top keywords leave out terms its sentences hold
        assert (contains & ~chunk_links).any()
