"""Without an embed_model the adapters work offline: Settings' model if the app set one,
else conceptgraph's MiniLM, never LlamaIndex's unset default (OpenAI: a package and a key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.schema import TextNode

from llama_index_conceptgraph import ConceptGraphRetriever, CoreChunkSelector, CoreEmbedding
from shared_core import HashingEmbedder
from shared_core.embeddings import MINILM_MODEL_ID
from shared_core.embeddings.models import BF16_SUFFIX, resolve_precision

NODES = [
    ("bio", "Photosynthesis turns sunlight into chemical energy in plant leaves."),
    ("history", "The Treaty of Westphalia ended the Thirty Years' War in 1648."),
    ("astro", "Jupiter is the largest planet in the solar system."),
]


def nodes() -> list[TextNode]:
    return [TextNode(id_=key, text=text) for key, text in NODES]


@pytest.fixture
def nothing_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process: the app never set ``Settings.embed_model``."""
    monkeypatch.setattr(Settings, "_embed_model", None)


@pytest.mark.slow
def test_defaults_to_offline_minilm_loaded_once(nothing_set: None, tmp_path: Path) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=nodes())
    embedder = retriever.index.embedder
    # MiniLM at the default precision: bf16 where this CPU computes it natively
    assert embedder.model_id.removesuffix(BF16_SUFFIX) == MINILM_MODEL_ID
    assert embedder.model_id.endswith(BF16_SUFFIX) == (resolve_precision("auto", "cpu") == "bf16")
    assert embedder.dim == 384
    # no content word in common with "Jupiter is the largest planet in the solar system":
    # only a semantic model puts astro first
    top = retriever.retrieve("Which gas giant is the biggest world circling the Sun?")[0]
    assert top.node.node_id == "astro"
    # LlamaIndex's own default was never resolved (it would have raised ImportError here)
    assert Settings._embed_model is None

    # every default user shares the one loaded model
    selector = CoreChunkSelector(kappa=1.0)
    assert [n.node_id for n in selector(nodes())] == ["bio", "history", "astro"]
    assert selector.index.embedder is embedder
    retriever.persist(tmp_path / "cg")
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg")
    assert loaded.index.embedder is embedder
    from llama_index_conceptgraph import default_embed_model

    assert default_embed_model().embedder is embedder
    assert default_embed_model() is not default_embed_model()  # fresh wrappers, one model


def test_settings_embed_model_set_by_the_app_wins_over_the_default(
    settings_embed_model: CoreEmbedding,
) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=nodes())
    assert retriever.index.embedder is settings_embed_model.embedder
    selector = CoreChunkSelector(kappa=1.0)
    selector(nodes())
    assert selector.index.embedder is settings_embed_model.embedder


def test_an_explicit_embed_model_wins_over_settings(settings_embed_model: CoreEmbedding) -> None:
    mine = CoreEmbedding(HashingEmbedder(64))
    retriever = ConceptGraphRetriever.from_defaults(nodes=nodes(), embed_model=mine)
    assert retriever.index.embedder is mine.embedder
    assert retriever.index.embedder is not settings_embed_model.embedder
