"""Shared fixtures: a small corpus with distinct proper names and hashing-backed embeddings."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from langchain_conceptgraph import CoreEmbeddings
from shared_core import HashingEmbedder

CORPUS = {
    "ada": "Ada Lovelace wrote the first computer program for the Analytical Engine.",
    "babbage": "Charles Babbage designed the Analytical Engine in London.",
    "turing": "Alan Turing proposed the Turing machine in 1936.",
    "hopper": "Grace Hopper built the first compiler for the Harvard Mark I.",
    "mark": "The Harvard Mark I was an electromechanical computer at Harvard University.",
    "web": "Tim Berners-Lee invented the World Wide Web at CERN.",
    "cern": "CERN is a physics laboratory near Geneva.",
    "curie": "Marie Curie won the Nobel Prize in Physics and in Chemistry.",
}


def corpus_documents() -> list[Document]:
    return [Document(page_content=text, id=cid, metadata={"title": cid})
            for cid, text in CORPUS.items()]


def hashing_embeddings() -> CoreEmbeddings:
    return CoreEmbeddings(HashingEmbedder())


@pytest.fixture
def documents() -> list[Document]:
    return corpus_documents()


@pytest.fixture
def embeddings() -> CoreEmbeddings:
    return hashing_embeddings()
