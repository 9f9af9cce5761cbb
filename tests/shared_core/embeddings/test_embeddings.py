"""Embedders: hashing determinism, the content-hash cache, output validation, OpenAI batching."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from shared_core.embeddings import (
    CachedEmbedder,
    EmbeddingCache,
    FunctionEmbedder,
    HashingEmbedder,
    OpenAIEmbedder,
    check_texts,
    normalise_rows,
)
from tests.shared_core.fakes import RecordingEmbedder
from tests.shared_core.openai_stub import StubOpenAI


class Raw:
    """An inner embedder that returns whatever ``fn`` makes of the texts."""

    def __init__(self, fn: Callable[[list[str]], Any], dim: int = 4) -> None:
        self.fn = fn
        self._dim = dim

    @property
    def model_id(self) -> str:
        return "raw"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.fn(list(texts))  # type: ignore[no-any-return]


def _bucket(word: str, dim: int) -> tuple[int, float]:
    # HashingEmbedder's documented scheme: blake2b-64 of the lowercase word, bucket by
    # modulo, sign by the top bit
    value = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return value % dim, (1.0 if value >> 63 else -1.0)


# ------------------------------------------------------------------ HashingEmbedder
def test_hashing_embedder_is_deterministic_and_unit_norm() -> None:
    texts = ["The quick brown fox.", "Jumps over the lazy dog!", "x"]
    a = HashingEmbedder(64).embed(texts)
    b = HashingEmbedder(64).embed(texts)  # a fresh instance: nothing random, no state
    assert a.dtype == np.float32 and a.shape == (3, 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)


def test_hashing_embedder_single_word_is_a_signed_basis_vector() -> None:
    dim = 32
    bucket, sign = _bucket("zebra", dim)
    expected = np.zeros(dim, dtype=np.float32)
    expected[bucket] = sign
    vec = HashingEmbedder(dim).embed(["Zebra"])[0]  # lowercased before hashing
    np.testing.assert_allclose(vec, expected)
    # bag of words: order and repetition of one word do not matter after normalising
    e = HashingEmbedder(dim)
    np.testing.assert_allclose(e.embed(["apple banana"]), e.embed(["banana, APPLE"]))
    np.testing.assert_allclose(e.embed(["zebra zebra"])[0], expected)


def test_hashing_embedder_properties_and_bad_dim() -> None:
    e = HashingEmbedder(16)
    assert e.dim == 16 and e.model_id == "hashing-bow-16"
    for bad in (4, 0, 16.0, "16"):
        with pytest.raises(ValueError, match="dim"):
            HashingEmbedder(bad)  # type: ignore[arg-type]


def test_embedders_reject_bad_texts() -> None:
    e = HashingEmbedder(16)
    with pytest.raises(TypeError, match="sequence of str"):
        e.embed("just a string")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        e.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"texts\[0\] is empty or whitespace"):
        e.embed([" \n\t"])
    with pytest.raises(ValueError, match=r"query\[0\]"):
        check_texts([""], "query")
    assert check_texts(("a", "b")) == ["a", "b"]


def test_check_texts_rejects_lone_surrogates_and_nul_with_position_and_offset() -> None:
    texts = ["fine", "also fine", "ok \U0001F600", "seventeen chars: \ud800 here"]
    with pytest.raises(ValueError, match=re.escape(
            "texts[3] contains a lone surrogate (U+D800) at character 17: "
            "text must be valid Unicode")):
        check_texts(texts)
    with pytest.raises(ValueError, match=re.escape("chunks[1] contains a NUL character at "
                                                   "character 5")):
        check_texts(["ok", "five \x00"], "chunks")  # "five " is characters 0-4
    # an embedder never sees such text (nor hashes it for the cache)
    with pytest.raises(ValueError, match="lone surrogate"):
        CachedEmbedder(HashingEmbedder(16)).embed(["\udc80"])


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("output", "message"),
    [
        (np.ones((2, 3)), "dimension 3, expected 4"),
        (np.ones((1, 4)), r"shape \(1, 4\), expected \(2, 4\)"),
        (np.ones(8), "shape"),
        (np.array([[1, 0, 0, 0], [np.nan, 0, 0, 0]]), "non-finite"),
        (np.array([[1, 0, 0, 0], [np.inf, 0, 0, 0]]), "non-finite"),
        (np.array([[1, 0, 0, 0], [0, 0, 0, 0]]), "all-zero"),
    ],
)
def test_cached_embedder_rejects_bad_inner_output(output: np.ndarray, message: str) -> None:
    cached = CachedEmbedder(Raw(lambda texts: output))
    with pytest.raises(ValueError, match=message):
        cached.embed(["first", "second"])
    assert len(cached.cache) == 0  # nothing poisoned the cache


def test_normalise_rows_scales_to_unit_length() -> None:
    out = normalise_rows([[3.0, 4.0], [0.0, -2.0]], 2, 2, "m")
    # (3,4)/5 and (0,-2)/2
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, -1.0]])
    assert out.dtype == np.float32


def test_function_embedder_validates_and_normalises() -> None:
    fe = FunctionEmbedder(lambda texts: [[2.0, 0.0]] * len(texts), "fn", 2)
    np.testing.assert_allclose(fe.embed(["a", "b"]), [[1, 0], [1, 0]])
    assert fe.embed([]).shape == (0, 2)
    short = FunctionEmbedder(lambda texts: [[1.0, 0.0]], "fn", 2)
    with pytest.raises(ValueError, match="shape"):
        short.embed(["a", "b"])


# ------------------------------------------------------------------ cache
def test_cached_embedder_embeds_each_distinct_text_once() -> None:
    inner = RecordingEmbedder(HashingEmbedder(32))
    cached = CachedEmbedder(inner)
    first = cached.embed(["alpha", "beta", "alpha"])
    # duplicates within one call go to the model once
    assert inner.calls == [["alpha", "beta"]]
    np.testing.assert_array_equal(first[0], first[2])
    second = cached.embed(["beta", "gamma", "alpha"])
    assert inner.calls[1] == ["gamma"]  # only the unseen text
    assert cached.embedded_texts == 3
    direct = HashingEmbedder(32).embed(["beta", "gamma", "alpha"])
    np.testing.assert_allclose(second, direct)
    cached.embed(["gamma", "alpha"])
    assert len(inner.calls) == 2  # all cached: no model call at all
    assert cached.embed([]).shape == (0, 32)
    assert cached.model_id == "hashing-bow-32" and cached.dim == 32


def test_file_cache_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cache.sqlite"
    first = CachedEmbedder(RecordingEmbedder(HashingEmbedder(32)), EmbeddingCache(path))
    vectors = first.embed(["one", "two"])
    first.cache.close()
    inner = RecordingEmbedder(HashingEmbedder(32))
    again = CachedEmbedder(inner, EmbeddingCache(path))
    np.testing.assert_array_equal(again.embed(["two", "one"]), vectors[::-1])
    assert inner.calls == [] and again.embedded_texts == 0
    assert len(again.cache) == 2


def test_file_cache_is_shared_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    package = Path(__file__).resolve().parents[3] / "shared_core"
    # the module and what it imports (shared_core.text), without the package's __init__ and the
    # index behind it: a cheap second interpreter
    script = textwrap.dedent(
        f"""
        import importlib, sys, types
        package = types.ModuleType("shared_core")
        package.__path__ = [{str(package)!r}]
        sys.modules["shared_core"] = package
        m = importlib.import_module("shared_core.embeddings")
        c = m.CachedEmbedder(m.HashingEmbedder(32), m.EmbeddingCache({str(path)!r}))
        c.embed(["written by another process", "second text"])
        assert c.embedded_texts == 2
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[3])
    inner = RecordingEmbedder(HashingEmbedder(32))
    cached = CachedEmbedder(inner, EmbeddingCache(path))
    out = cached.embed(["second text", "written by another process", "new here"])
    assert inner.calls == [["new here"]]  # the other process's texts came from the file
    np.testing.assert_allclose(out, HashingEmbedder(32).embed(
        ["second text", "written by another process", "new here"]))


def test_cache_keys_by_model_id() -> None:
    cache = EmbeddingCache()
    a = RecordingEmbedder(HashingEmbedder(32))
    b = RecordingEmbedder(HashingEmbedder(64))  # another model id: never served a's vectors
    CachedEmbedder(a, cache).embed(["same text"])
    out = CachedEmbedder(b, cache).embed(["same text"])
    assert b.calls == [["same text"]] and out.shape == (1, 64)


def test_cache_entry_of_wrong_width_is_an_error() -> None:
    cache = EmbeddingCache()
    cache.put_many("m", {EmbeddingCache.key("t"): np.ones(3, dtype=np.float32)})
    fake = Raw(lambda texts: np.ones((len(texts), 4)))
    fake_id = type("M", (), {"model_id": "m", "dim": 4, "embed": fake.embed})()
    with pytest.raises(ValueError, match="3 dims, expected 4"):
        CachedEmbedder(fake_id, cache).embed(["t"])


def test_cache_on_a_non_sqlite_file_raises(tmp_path: Path) -> None:
    bad = tmp_path / "cache.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ValueError, match="not a valid SQLite file") as caught:
        EmbeddingCache(bad)
    assert str(bad) in str(caught.value) and "locked" not in str(caught.value)


def test_cache_locked_by_another_process_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    EmbeddingCache(path).close()  # a valid cache file
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # what a writer in another process holds
    try:
        start = time.perf_counter()
        with pytest.raises(ValueError, match=re.escape(
                f"embedding cache {path} is locked by another process (waited 0.2 s)")) as caught:
            EmbeddingCache(path, timeout=0.2)
        assert time.perf_counter() - start < 10  # gave up after its timeout, not 60 s
        assert "not a valid SQLite file" not in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    cache = EmbeddingCache(path, timeout=0.2)  # the lock gone, the same file opens
    assert len(cache) == 0
    cache.close()


def test_cache_write_blocked_by_a_lock_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = EmbeddingCache(path, timeout=0.1)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ValueError, match="is locked by another process"):
            cache.put_many("m", {EmbeddingCache.key("t"): np.ones(4, dtype=np.float32)})
        with pytest.raises(ValueError, match="is locked by another process"):
            cache.get_many("m", 4, [EmbeddingCache.key("t")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    cache.put_many("m", {EmbeddingCache.key("t"): np.ones(4, dtype=np.float32)})
    assert len(cache) == 1  # the failed write left nothing half-done, the retry landed
    cache.close()


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "5", True])
def test_cache_timeout_must_be_seconds(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout must be"):
        EmbeddingCache(None, timeout=timeout)  # type: ignore[arg-type]


# ------------------------------------------------------------------ OpenAI (fake client)
class FakeOpenAI:
    """Mimics ``client.embeddings.create``; rows come back in reverse index order."""

    def __init__(self, dim: int, drop: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.dim = dim
        self.drop = drop
        self.embeddings = SimpleNamespace(create=self._create)

    def _create(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        items = []
        for i, text in enumerate(kwargs["input"]):
            vec = [0.0] * self.dim
            vec[0], vec[1] = 3.0 * len(text), 4.0 * len(text)  # norm 5·len: unit is (.6,.8)
            vec[2] = float(i)  # marks the row so order is checkable
            items.append(SimpleNamespace(index=i, embedding=vec))
        items = items[: len(items) - self.drop]
        return SimpleNamespace(data=list(reversed(items)))


def test_openai_without_key_raises_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIEmbedder()


def test_openai_batches_sorts_and_normalises() -> None:
    fake = FakeOpenAI(dim=4)
    emb = OpenAIEmbedder("text-embedding-3-small", dim=4, batch_size=2, client=fake)
    assert emb.dim == 4 and emb.model_id == "openai/text-embedding-3-small@4"
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    out = emb.embed(texts)
    # 5 texts in batches of 2: [a, bb], [ccc, dddd], [eeeee]
    assert [r["input"] for r in fake.requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert all(r["model"] == "text-embedding-3-small" for r in fake.requests)
    # a non-default width for a known model is requested explicitly
    assert all(r["dimensions"] == 4 for r in fake.requests)
    # row for the i-th text of its batch is (3L, 4L, i, 0), L = len(text)
    for text, row in zip(texts, out, strict=True):
        i = texts.index(text) % 2
        raw = np.array([3.0 * len(text), 4.0 * len(text), i, 0.0])
        np.testing.assert_allclose(row, raw / np.linalg.norm(raw), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    assert emb.embed([]).shape == (0, 4)


def test_openai_default_width_sends_no_dimensions() -> None:
    fake = FakeOpenAI(dim=1536)
    emb = OpenAIEmbedder(client=fake)
    assert emb.dim == 1536
    emb.embed(["hello"])
    assert "dimensions" not in fake.requests[0]


def test_openai_too_few_rows_is_an_error() -> None:
    emb = OpenAIEmbedder("text-embedding-3-small", dim=4, client=FakeOpenAI(4, drop=1))
    with pytest.raises(ValueError, match="returned 1 embeddings for 2 inputs"):
        emb.embed(["one", "two"])


def test_openai_unknown_model_needs_dim() -> None:
    with pytest.raises(ValueError, match="dim="):
        OpenAIEmbedder("my-custom-model", client=FakeOpenAI(4))


# ------------------------------------------------------------ OpenAI (real client, stub server)
# The real ``openai`` client talks HTTP to StubOpenAI on 127.0.0.1; pytest-socket allows
# loopback only. Stub vectors count characters by ord(c) % width; with width 4:
# d -> 0, a -> 1, b -> 2, c -> 3.
loopback = pytest.mark.allow_hosts(["127.0.0.1"])


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@loopback
def test_openai_base_url_reaches_a_compatible_server(no_openai_env: None) -> None:
    with StubOpenAI(native_dim=4) as stub:
        emb = OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4, batch_size=2)
        out = emb.embed(["daabb", "aabcc", "cccc"])
    assert [r.path for r in stub.requests] == ["/v1/embeddings", "/v1/embeddings"]
    assert [r.body["input"] for r in stub.requests] == [["daabb", "aabcc"], ["cccc"]]
    assert all(r.body["model"] == "stub-embed" for r in stub.requests)
    # dim only declares a model's width we cannot know: nothing asks the server to shorten
    assert all("dimensions" not in r.body for r in stub.requests)
    # no key anywhere: a server of our own gets the placeholder, not a refusal
    assert all(r.headers["authorization"] == "Bearer EMPTY" for r in stub.requests)
    # daabb -> (1,2,2,0)/3, aabcc -> (0,2,1,2)/3, cccc -> (0,0,0,4)/4; rows came back reversed
    expected = np.array([[1, 2, 2, 0], [0, 2, 1, 2], [0, 0, 0, 3]]) / 3
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out.dtype == np.float32 and emb.model_id == "openai/stub-embed@4"


@loopback
def test_openai_dimensions_are_sent_when_asked(no_openai_env: None) -> None:
    with StubOpenAI(native_dim=8) as stub:
        # a known OpenAI model at a width other than its native 1536: shortened by the server
        short = OpenAIEmbedder("text-embedding-3-small", api_key="sk-test", base_url=stub.url,
                               dim=4)
        np.testing.assert_allclose(short.embed(["daabb"]), [[1 / 3, 2 / 3, 2 / 3, 0]],
                                   rtol=1e-6)
        # any model, when the caller says so
        asked = OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4, send_dimensions=True)
        np.testing.assert_allclose(asked.embed(["aabcc"]), [[0, 2 / 3, 1 / 3, 2 / 3]],
                                   rtol=1e-6)
    assert [r.body["dimensions"] for r in stub.requests] == [4, 4]
    assert stub.requests[0].body["model"] == "text-embedding-3-small"
    assert stub.requests[0].headers["authorization"] == "Bearer sk-test"
    assert [r.body["input"] for r in stub.requests] == [["daabb"], ["aabcc"]]


@loopback
def test_openai_base_url_from_the_environment(no_openai_env: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with StubOpenAI(native_dim=8) as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        out = OpenAIEmbedder("stub-embed", dim=8).embed(["hello"])
    # width 8: h=104 -> 0, e=101 -> 5, l=108 -> 4 (twice), o=111 -> 7: (1,0,0,0,2,1,0,1)/sqrt 7
    np.testing.assert_allclose(out, [np.array([1, 0, 0, 0, 2, 1, 0, 1]) / np.sqrt(7)],
                               rtol=1e-6)
    assert stub.requests[0].headers["authorization"] == "Bearer sk-env"


@loopback
def test_openai_wrong_width_from_the_server_is_a_clear_error(no_openai_env: None) -> None:
    with StubOpenAI(native_dim=8) as stub:
        emb = OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4)
        with pytest.raises(ValueError, match="returned vectors of dimension 8, expected 4"):
            emb.embed(["daabb"])


@loopback
def test_openai_max_retries_and_timeout_reach_the_client(no_openai_env: None) -> None:
    import openai

    with StubOpenAI(native_dim=4, fail_first=1) as stub:
        with pytest.raises(openai.InternalServerError):
            OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4, max_retries=0).embed(["a"])
        assert len(stub.requests) == 1  # no retry
    with StubOpenAI(native_dim=4, fail_first=1) as stub:
        out = OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4, max_retries=1).embed(["a"])
        np.testing.assert_allclose(out, [[0, 1, 0, 0]])
        assert len(stub.requests) == 2  # the 500, then the retry that succeeded
    with StubOpenAI(native_dim=4, delay=2.0) as stub:
        start = time.perf_counter()
        with pytest.raises(openai.APITimeoutError):
            OpenAIEmbedder("stub-embed", base_url=stub.url, dim=4, timeout=0.2,
                           max_retries=0).embed(["a"])
        assert time.perf_counter() - start < 1.5


@pytest.mark.parametrize("kwargs, message", [
    ({}, "needs an API key for api.openai.com"),
    ({"base_url": "https://api.openai.com/v1"}, "needs an API key for api.openai.com"),
    ({"base_url": "https://my-resource.openai.azure.com/openai/v1/"},
     "needs an API key for my-resource.openai.azure.com"),
    ({"base_url": "localhost:8000/v1"}, "base_url must be an http(s) URL"),
    ({"base_url": "http://127.0.0.1:8000/v1", "timeout": 0}, "timeout must be"),
    ({"base_url": "http://127.0.0.1:8000/v1", "max_retries": -1}, "max_retries must be"),
    ({"client": FakeOpenAI(1536), "base_url": "http://127.0.0.1:8000/v1"},
     "either client= or"),
    ({"batch_size": 0, "client": FakeOpenAI(1536)}, "batch_size must be"),
])
def test_openai_settings_are_checked_when_made(no_openai_env: None, kwargs: dict[str, Any],
                                               message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        OpenAIEmbedder(**kwargs)


def test_openai_bad_base_url_in_the_environment_names_it(
        no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "127.0.0.1:11434")
    with pytest.raises(ValueError, match=r"got '127.0.0.1:11434' \(from OPENAI_BASE_URL\)"):
        OpenAIEmbedder("nomic-embed-text", dim=768)


# ------------------------------------------------------------------ the real model
@pytest.mark.slow
def test_minilm_offline_model() -> None:
    from shared_core.embeddings import MINILM_MODEL_ID, minilm_embedder
    from shared_core.index import ConceptGraphIndex

    emb = minilm_embedder(precision="fp32")
    assert emb.dim == 384 and emb.model_id == MINILM_MODEL_ID
    vecs = emb.embed([
        "The cat is sleeping on the sofa.",
        "A kitten naps on the couch.",          # paraphrase
        "Quarterly tax filings are due in April.",  # unrelated
    ])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2]) + 0.2
    index = ConceptGraphIndex.from_texts(
        ["Photosynthesis turns sunlight into chemical energy in plant leaves.",
         "The Treaty of Westphalia ended the Thirty Years' War in 1648.",
         "Jupiter is the largest planet in the solar system."],
        ids=["bio", "history", "astro"], embedder=emb)
    result = index.retrieve("Which is the biggest planet orbiting the Sun?")
    assert result.chunks[0].id == "astro"


def test_framework_model_ids_follow_one_rule_and_legacy_ids_still_match() -> None:
    from shared_core.embeddings import framework_model_id, same_model

    class Named:
        model = "text-embedding-3-small"

    class Unnamed:
        pass

    class ByModelName:
        model_name = "bge-small"

    assert framework_model_id("langchain", Named()) == "langchain/Named/text-embedding-3-small"
    assert framework_model_id("llama-index", ByModelName()) == "llama-index/ByModelName/bge-small"
    assert framework_model_id("langchain", Unnamed()) == "langchain/Unnamed"
    # an index saved before the rule recorded LlamaIndex models with colons
    assert same_model("llama-index:OpenAIEmbedding:text-embedding-3-small",
                      "llama-index/OpenAIEmbedding/text-embedding-3-small")
    assert not same_model("llama-index:OpenAIEmbedding:text-embedding-3-small",
                          "llama-index/OpenAIEmbedding/text-embedding-3-large")
    assert same_model("hashing-bow-64", "hashing-bow-64")
    assert not same_model("hashing-bow-64", "hashing-bow-128")


def test_precision_auto_uses_bf16_only_where_the_hardware_has_it() -> None:
    from shared_core.embeddings.models import cpu_has_bf16, resolve_precision

    avx512_bf16 = "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile"
    amx = "flags\t\t: fpu avx2 amx_bf16"
    plain = "flags\t\t: fpu sse2 avx2 avx512f"
    assert cpu_has_bf16(avx512_bf16) and cpu_has_bf16(amx) and not cpu_has_bf16(plain)
    assert resolve_precision("auto", "cpu", avx512_bf16) == "bf16"
    assert resolve_precision("auto", "cpu", plain) == "fp32"  # emulated bf16 is slower
    assert resolve_precision("auto", "cuda:0", plain) == "bf16"
    assert resolve_precision("fp32", "cuda", avx512_bf16) == "fp32"  # the switch to force fp32
    with pytest.raises(ValueError, match="precision must be fp32, bf16 or auto"):
        resolve_precision("fp16", "cpu")


@pytest.mark.slow
def test_bf16_minilm_is_within_cosine_0_9999_of_fp32_and_has_its_own_id() -> None:
    from shared_core.embeddings import MINILM_MODEL_ID, minilm_embedder

    sentences = ["Ada Lovelace wrote the first computer program.",
                 "The analytical engine was designed by Charles Babbage.",
                 "東京は日本の首都です。", "Grace Hopper wrote the first compiler in 1952."]
    from shared_core.embeddings.models import resolve_precision

    fp32 = minilm_embedder(device="cpu", precision="fp32")
    bf16 = minilm_embedder(device="cpu", precision="bf16")
    assert fp32.model_id == MINILM_MODEL_ID and bf16.model_id == MINILM_MODEL_ID + "@bf16"
    # the default is "auto": bf16 where this CPU computes it natively, else fp32
    default = minilm_embedder(device="cpu")
    assert default.precision == resolve_precision("auto", "cpu")
    assert default.model_id == (bf16 if default.precision == "bf16" else fp32).model_id
    a, b = fp32.embed(sentences), bf16.embed(sentences)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() >= 0.9999 and not np.array_equal(a, b)  # close, and really bf16
