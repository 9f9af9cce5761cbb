"""Streaming build: any iterable in, batches of bounded size, one graph at the end,
errors named by stream position, and a killed build resumed from the embedding cache."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.faults import FailOnCall
from shared_core.corpus import CountedStream
from shared_core.embeddings import CachedEmbedder, EmbeddingCache, HashingEmbedder
from shared_core.index import ConceptGraphIndex
from shared_core.text import split_sentences
from tests.shared_core.fakes import RecordingEmbedder
from tests.shared_core.test_index_state import (
    CONFIGS,
    DIM,
    POOL,
    assert_same_index,
    ids_for,
)

META = [{"n": i} for i in range(len(POOL))]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("batch_size", [1, 3, 2048])
def test_a_stream_in_batches_equals_a_list_at_once(name: str, batch_size: int) -> None:
    cfg = CONFIGS[name]
    at_once = ConceptGraphIndex.from_texts(POOL, ids=ids_for(POOL), metadatas=META,
                                           embedder=HashingEmbedder(DIM), config=cfg)
    streamed = ConceptGraphIndex.from_texts(
        (t for t in POOL), ids=iter(ids_for(POOL)), metadatas=(m for m in META),
        embedder=HashingEmbedder(DIM), config=cfg, batch_size=batch_size)
    assert_same_index(streamed, at_once)


def test_each_step_embeds_one_batch_of_chunks() -> None:
    recorder = RecordingEmbedder(HashingEmbedder(DIM))
    ConceptGraphIndex.from_texts(iter(POOL), embedder=recorder, batch_size=4)
    # 10 chunks in batches of 4, 4 and 2: three embedding calls, each one batch's sentences
    sizes = [sum(len(split_sentences(t)) for t in POOL[a:b]) for a, b in ((0, 4), (4, 8),
                                                                          (8, 10))]
    assert [len(call) for call in recorder.calls] == sizes


@pytest.mark.parametrize("stream, error, message", [
    (["ok text.", "fine text.", "   "], ValueError, r"texts\[2\] is empty"),
    (["ok text.", "fine text.", 7], TypeError, r"texts\[2\] must be str"),
    (["ok text.", "bad \x00 text."], ValueError, r"texts\[1\] contains a NUL character"),
])
def test_a_bad_chunk_late_in_a_stream_is_named_and_nothing_is_published(
        stream: list[object], error: type[Exception], message: str) -> None:
    index = ConceptGraphIndex.from_texts(POOL[:2], embedder=HashingEmbedder(DIM))
    state = index.state
    with pytest.raises(error, match=message):
        index.add(iter(stream), batch_size=2)  # type: ignore[arg-type]
    assert index.state is state


def test_stream_columns_must_have_the_same_length_and_ids_must_not_repeat() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM))
    with pytest.raises(ValueError, match="differ in length"):
        index.add(iter(POOL[:3]), ids=iter(["a", "b"]))
    with pytest.raises(ValueError, match="duplicate chunk id 'a' at positions 0 and 2"):
        index.add(iter(POOL[:3]), ids=iter(["a", "b", "a"]), batch_size=2)
    with pytest.raises(ValueError, match=r"texts\[0\] and texts\[3\] are the same text"):
        index.add(iter([POOL[0], POOL[1], POOL[2], POOL[0]]),
                  metadatas=iter([{"v": 1}, {}, {}, {"v": 2}]), batch_size=2)
    with pytest.raises(TypeError, match="sequence of str"):
        index.add("one string")
    assert len(index) == 0


def test_a_killed_build_resumes_from_the_embedding_cache(tmp_path: Path) -> None:
    cache_file = tmp_path / "cache.sqlite"
    failing = FailOnCall(fail_on=3, dim=DIM)  # dies on the third batch's sentences
    with pytest.raises(TimeoutError):
        ConceptGraphIndex.from_texts(
            iter(POOL), embedder=CachedEmbedder(failing.embedder(), EmbeddingCache(cache_file)),
            batch_size=4)
    assert_resumed_from_the_third_batch(cache_file)


def assert_resumed_from_the_third_batch(cache_file: Path) -> None:
    """A build over ``cache_file``, left after the third of five batches failed, embeds
    that batch's sentences alone and equals a fresh build."""
    recorder = RecordingEmbedder(FailOnCall(dim=DIM).embedder())
    resumed = CachedEmbedder(recorder, EmbeddingCache(cache_file))
    index = ConceptGraphIndex.from_texts(iter(POOL), embedder=resumed, batch_size=4)
    # only the third batch (chunks 8 and 9) reaches the model again
    assert sorted(recorder.texts) == sorted(
        t[s:e] for t in POOL[8:] for s, e in split_sentences(t))
    # the same embedding path (the cache re-normalises), so floats compare exactly
    fresh = ConceptGraphIndex.from_texts(
        POOL, embedder=CachedEmbedder(FailOnCall(dim=DIM).embedder(), EmbeddingCache()))
    assert_same_index(index, fresh)


KILLED_CHILD = textwrap.dedent("""
    import sys, time
    from benchmarks.faults import FailOnCall
    from shared_core.embeddings import CachedEmbedder, EmbeddingCache
    from shared_core.index import ConceptGraphIndex
    from tests.shared_core.test_index_state import DIM, POOL

    class Stalls(FailOnCall):  # the third batch's call says so and waits to be killed
        def __call__(self, texts):
            if self.calls == 2:
                print("third batch", flush=True)
                time.sleep(600)
            return super().__call__(texts)

    embedder = CachedEmbedder(Stalls(dim=DIM).embedder(), EmbeddingCache(sys.argv[1]))
    ConceptGraphIndex.from_texts(iter(POOL), embedder=embedder, batch_size=4)
""")


def test_a_build_killed_with_sigkill_resumes_from_the_embedding_cache(tmp_path: Path) -> None:
    # kill -9 while the third batch is being embedded: the two before it are in the cache
    cache_file = tmp_path / "cache.sqlite"
    root = Path(__file__).parents[2]
    child = subprocess.Popen([sys.executable, "-c", KILLED_CHILD, str(cache_file)],
                             stdout=subprocess.PIPE, cwd=root,
                             env={**os.environ, "PYTHONPATH": str(root)})
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"third batch"
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert_resumed_from_the_third_batch(cache_file)


def test_progress_shows_chunks_throughput_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    ConceptGraphIndex.from_texts(POOL, embedder=HashingEmbedder(DIM), show_progress=True,
                                 batch_size=4)
    err = capsys.readouterr().err
    assert "adding chunks" in err and "10/10" in err and "chunk/s" in err
    assert re.search(ETA, err)
    ConceptGraphIndex.from_texts((t for t in POOL), embedder=HashingEmbedder(DIM),
                                 show_progress=True, batch_size=4)
    err = capsys.readouterr().err  # a generator, of unknown length: a count and a rate
    assert "adding chunks" in err and "10chunk" in err.replace(" ", "")
    assert not re.search(ETA, err)
    ConceptGraphIndex.from_texts(CountedStream((t for t in POOL), len(POOL)),
                                 embedder=HashingEmbedder(DIM), show_progress=True, batch_size=4)
    err = capsys.readouterr().err  # a stream that knows its length: a total and an ETA
    assert "10/10" in err and re.search(ETA, err)


ETA = r"\[\d\d:\d\d<\d\d:\d\d"  # tqdm's [elapsed<remaining: only with a total


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        ConceptGraphIndex.from_texts(POOL, embedder=HashingEmbedder(DIM), batch_size=0)
