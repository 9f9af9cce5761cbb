"""The scale benchmark's synthetic corpus: real sentences recombined, unique ids, repeatable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.scale import DiskReads, folder_size, passages

POOL = [f"Sentence number {i} is here." for i in range(20)]


def test_passages_recombine_pool_sentences_with_unique_ids() -> None:
    ids, texts = passages(POOL, 50, seed=1)
    assert len(ids) == len(set(ids)) == len(texts) == 50
    for text in texts:
        sentences = re.findall(r"Sentence number \d+ is here\.", text)
        assert 3 <= len(sentences) <= 6 and " ".join(sentences) == text
        assert set(sentences) <= set(POOL)
    # the same seed gives the same corpus; another seed another one, with other ids
    assert passages(POOL, 50, seed=1) == (ids, texts)
    other_ids, other_texts = passages(POOL, 50, seed=2)
    assert not set(other_ids) & set(ids) and other_texts != texts


NAMED = ["Ada met Babbage in London. Babbage wrote to Ada.", "Lovelace said so.",
         "The engine was built in London by Babbage."]


def test_fresh_names_replace_capitalised_words_at_every_occurrence() -> None:
    from benchmarks.scale import fresh_name, renamed

    assert [fresh_name(i) for i in (0, 1, 26, 26 ** 6 - 1)] == [
        "Qxaaaaaa", "Qxaaaaab", "Qxaaaaba", "Qxzzzzzz"]
    with pytest.raises(ValueError, match="past the 308,915,776"):
        fresh_name(26 ** 6)
    # a mean far above the words a text has: every capitalised word found outside a
    # sentence's opening is renamed, at every occurrence (Ada's opening one too), each to
    # a name of its own, numbered across the texts in the order of the words' spelling
    out = renamed(NAMED, 50.0, np.random.default_rng(0))
    assert out == ["Qxaaaaaa met Qxaaaaab in Qxaaaaac. Qxaaaaab wrote to Qxaaaaaa.",
                   "Lovelace said so.",  # its one capitalised word opens the sentence
                   "The engine was built in Qxaaaaae by Qxaaaaad."]
    assert renamed(NAMED, 0.0, np.random.default_rng(0)) == NAMED


def test_fresh_names_keep_the_recombined_sentences_and_add_concepts() -> None:
    from shared_core import ConceptGraphIndex, HashingEmbedder

    pool = ["Ada Lovelace met Charles Babbage in London.", "Babbage designed the Engine.",
            "The Engine used Jacquard cards.", "Menabrea wrote about it in Turin."]
    ids, plain = passages(pool, 40, seed=3)
    renamed_ids, named = passages(pool, 40, seed=3, fresh_names=1.0)
    assert renamed_ids == ids and named != plain
    fresh = re.compile(r"Qx[a-z]{6}")
    # put the old words back and the texts are the plain ones: nothing else changed
    for text, original in zip(named, plain, strict=True):
        assert len(text.split()) == len(original.split())
        assert [w for w in text.split() if not fresh.search(w)] == [
            o for w, o in zip(text.split(), original.split(), strict=True)
            if not fresh.search(w)]

    def concepts(texts: list[str]) -> int:
        index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=HashingEmbedder(16))
        return int(index.stats()["concepts"])

    names = {m for text in named for m in fresh.findall(text)}
    assert names and concepts(named) > concepts(plain)


def test_fresh_names_numbered_from_a_start_are_other_names_in_the_same_places() -> None:
    """Passages added to a save give their names a start past the save's: the same
    words are renamed, to names counted from that start."""
    from benchmarks.scale import fresh_name

    pool = ["Ada Lovelace met Charles Babbage in London.", "Menabrea wrote about it in Turin."]
    _, first = passages(pool, 20, seed=5, fresh_names=1.0)
    _, later = passages(pool, 20, seed=5, fresh_names=1.0, first_name=1_000)
    fresh = re.compile(r"Qx[a-z]{6}")
    names = [m for text in first for m in fresh.findall(text)]
    assert names and names[0] == fresh_name(0)
    start = {fresh_name(i): fresh_name(1_000 + i) for i in range(len(set(names)))}
    assert later == [fresh.sub(lambda m: start[m.group(0)], text) for text in first]


def test_rows_from_several_reports_one_per_size_and_plotted(tmp_path: Path) -> None:
    """A later report's row replaces an earlier one of the same size; rows come by size."""
    from benchmarks.scale import PLOTTED_COSTS, plot_costs, rows_by_size

    def row(n: int, cost: float) -> dict[str, float]:
        return {"passages": n, "vector_index": "exact",
                **{key: cost for key, _, _ in PLOTTED_COSTS}}

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"rows": [row(100_000, 9.0), row(10_000, 1.0)]}))
    second.write_text(json.dumps({"rows": [row(30_000, 3.0), row(10_000, 2.0)]}))
    rows = rows_by_size([first, second])
    assert [(r["passages"], r["load_s"]) for r in rows] == [(10_000, 2.0), (30_000, 3.0),
                                                             (100_000, 9.0)]
    out = tmp_path / "plot" / "scale.png"
    plot_costs(rows, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_store_querys_local_share_is_its_time_outside_the_stores_searches(
        tmp_path: Path) -> None:
    """Each query's local milliseconds are its milliseconds less its time in the store's
    searches: over the run they add up to the total less the store's seconds."""
    import numpy as np

    from benchmarks.scale import Queries, TimedStore, percentile_fields, query_latencies
    from shared_core import ConceptGraphIndex, HashingEmbedder
    from shared_core.search.milvus import MilvusVectorStore

    embedder = HashingEmbedder(32)
    store = TimedStore(MilvusVectorStore(str(tmp_path / "milvus.db"), "t", index_type="FLAT"))
    ids, texts = passages(POOL, 30, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    asked = Queries(POOL[:5], np.asarray(embedder.embed(POOL[:5]), dtype=np.float32))
    store.search_seconds = 0.0
    local: list[float] = []
    latencies, contexts = query_latencies(index, asked, store, local)
    assert len(local) == len(latencies) == len(contexts) == 5
    assert store.search_seconds > 0  # every query asked the store
    assert all(0 < mine < total for mine, total in zip(local, latencies, strict=True))
    assert np.isclose(sum(latencies) - sum(local), store.search_seconds * 1000, rtol=1e-9)
    fields = percentile_fields("local_query_ms", local)
    assert set(fields) == {"local_query_ms_p50", "local_query_ms_p95"}
    assert fields["local_query_ms_p50"] == round(float(np.percentile(local, 50)), 2)
    assert percentile_fields("x", []) == {}


def test_a_replica_of_the_save_is_measured_against_the_loaded_index(tmp_path: Path) -> None:
    """``replica_figures`` opens the save as a replica over the same store: the same
    contexts, with and without rows kept, and the save's size without its vectors."""
    import numpy as np

    from benchmarks.scale import Queries, TimedStore, query_latencies, replica_figures
    from shared_core import ConceptGraphIndex, HashingEmbedder, QdrantStore
    from shared_core.store import index_folder

    embedder = HashingEmbedder(32)
    store = TimedStore(QdrantStore(str(tmp_path / "qdrant"), "t"))
    ids, texts = passages(POOL, 30, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    index.save(str(tmp_path / "idx"))
    asked = Queries(POOL[:5], np.asarray(embedder.embed(POOL[:5]), dtype=np.float32))
    _, contexts = query_latencies(index, asked)
    figures = replica_figures(tmp_path / "idx", embedder, store, asked, contexts)
    assert figures["replica_context_vs_loaded"] == 1.0
    assert figures["replica_uncached_context_vs_loaded"] == 1.0
    assert figures["replica_rows_total"] == len(index.state.corpus.sentence_vectors)
    vectors = (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").stat().st_size
    assert figures["replica_disk_mb"] == round(
        (folder_size(tmp_path / "idx") - vectors) / 2**20, 1)
    assert 0 < figures["replica_local_query_ms_p50"] <= figures["replica_query_ms_p50"]


def test_the_writer_that_holds_no_vector_is_measured_against_the_loaded_index(
        tmp_path: Path) -> None:
    """``writer_figures`` opens the save as the writer over the same store, adds and
    deletes the same chunks, and answers as the loaded index; its save beside the
    loaded one holds no vector file, and the loaded save is left as it was."""
    import numpy as np

    from benchmarks.scale import Queries, TimedStore, query_latencies, writer_figures
    from shared_core import ConceptGraphIndex, HashingEmbedder, QdrantStore
    from shared_core.store import index_folder

    embedder = HashingEmbedder(32)
    store = TimedStore(QdrantStore(str(tmp_path / "qdrant"), "t"))
    ids, texts = passages(POOL, 30, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    index.save(str(tmp_path / "idx"))
    before = sorted(p.name for p in index_folder(tmp_path / "idx").iterdir())
    asked = Queries(POOL[:5], np.asarray(embedder.embed(POOL[:5]), dtype=np.float32))
    _, contexts = query_latencies(index, asked)
    extra_ids, extra_texts = passages(POOL, 3, seed=2)
    figures = writer_figures(tmp_path / "idx", embedder, store, asked, contexts,
                             extra_texts, extra_ids)
    assert figures["writer_context_vs_loaded"] == 1.0
    # (its update times are reported, not tested: rounded to 10 ms, a tiny delete is 0.0)
    assert {"writer_add_1pct_s", "writer_delete_1pct_s"} <= set(figures)
    # the updates read rows back from the store (the new chunks' and the relinked
    # sentences'), not every row it holds
    assert 0 < figures["writer_update_rows_read"] < len(index.state.corpus.sentence_spans)
    saved = index_folder(tmp_path / "writer")
    assert not (saved / "sentence_embeddings.npy").exists()
    assert figures["writer_disk_mb"] == round(folder_size(tmp_path / "writer") / 2**20, 1)
    assert sorted(p.name for p in index_folder(tmp_path / "idx").iterdir()) == before
    assert set(store.list_keys()) == set(index.state.stored_rows().keys_of(range(len(index))))


def test_milvus_index_and_search_parameters_reach_the_store(tmp_path: Path) -> None:
    """``--milvus-index-params`` and ``--milvus-search-params`` go to the store as given.
    An IVF index probing all of its lists searches every row, so the index over it ranks
    as the in-process one does."""
    from benchmarks.scale import open_store
    from shared_core import ConceptGraphIndex, HashingEmbedder

    embedder = HashingEmbedder(32)
    store = open_store("milvus-lite", tmp_path, embedder, "IVF_FLAT", None, {"nlist": 4},
                       {"nprobe": 4})
    assert (store.store.index_type, store.store.index_params,
            store.store.search_params) == ("IVF_FLAT", {"nlist": 4}, {"nprobe": 4})
    ids, texts = passages(POOL, 30, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    local = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder)
    for query in POOL[:5]:
        assert ([c.id for c in index.retrieve(query).chunks]
                == [c.id for c in local.retrieve(query).chunks])


def test_no_exact_refuses_the_sweeps_that_compare_with_exact(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-exact`` with a sweep would measure the sweep against nothing: refused."""

    from benchmarks.scale import main

    for sweep in (["--beams", "64"], ["--candidates", "300"], ["--walk-postings", "100"]):
        with pytest.raises(SystemExit) as stopped:
            main(["--sizes", "10", "--no-exact", *sweep])
        assert stopped.value.code == 2
        assert "drop --no-exact" in capsys.readouterr().err


def test_fresh_names_are_for_saves_and_never_negative(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.scale import main

    with pytest.raises(SystemExit):
        main(["--sizes", "10", "--fresh-names", "1"])
    assert "--fresh-names is for --save" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--sizes", "10", "--fresh-names", "-1", "--save", "/nonexistent"])
    assert "0 or more" in capsys.readouterr().err


def test_a_fresh_process_answers_the_save_as_the_loaded_index(tmp_path: Path) -> None:
    """``fresh_process_figures`` loads the save in a new process and asks it the same
    questions: the same contexts, a p50 per pass and their median; a save that is not
    there fails the run with the child's error, not a figure."""
    from benchmarks.scale import FRESH_PASSES, Queries, fresh_process_figures, query_latencies
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder

    embedder = HashingEmbedder(32)
    ids, texts = passages(POOL, 30, seed=1)
    # a budget of a few passages (saved with the index): each question's own context
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder,
                                         config=ConceptGraphConfig(budget=40))
    index.save(str(tmp_path / "idx"))
    asked = Queries(POOL[:5], np.asarray(embedder.embed(POOL[:5]), dtype=np.float32))
    _, contexts = query_latencies(ConceptGraphIndex.load(str(tmp_path / "idx"), embedder), asked)
    assert all(contexts)
    figures = fresh_process_figures(tmp_path / "idx", asked, contexts)
    assert figures["fresh_context_recall_vs_loaded"] == 1.0
    passes = figures["fresh_query_ms_passes"]
    assert len(passes) == FRESH_PASSES and all(p > 0 for p in passes)
    assert figures["fresh_query_ms_p50"] == round(float(np.median(passes)), 2)
    # another question's context is not this one's: the comparison can fail
    other = fresh_process_figures(tmp_path / "idx", asked, [contexts[-1], *contexts[:-1]])
    assert other["fresh_context_recall_vs_loaded"] < 1.0
    with pytest.raises(RuntimeError, match="fresh process"):
        fresh_process_figures(tmp_path / "missing", asked, contexts)


def test_repeated_updates_add_and_delete_the_chunks_each_time_and_report_medians() -> None:
    """``repeated_updates`` adds the chunks and deletes them again ``times`` times: each add
    grows the index by them (an add of ids already held would raise), and the index ends
    as it began. Its figures are the medians, as seconds."""
    from benchmarks.scale import repeated_updates
    from shared_core import ConceptGraphIndex, HashingEmbedder

    ids, texts = passages(POOL, 30, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=HashingEmbedder(32))
    extra_ids, extra_texts = passages(POOL, 3, seed=2)
    sizes: list[int] = []
    add = index.add

    def counted_add(*args: object, **kwargs: object) -> object:
        out = add(*args, **kwargs)  # type: ignore[arg-type]
        sizes.append(len(index))
        return out

    index.add = counted_add  # type: ignore[method-assign]
    figures = repeated_updates(index, extra_texts, extra_ids, times=3)
    assert sizes == [33, 33, 33] and len(index) == 30
    assert set(figures) == {"add_1pct_median_s", "delete_1pct_median_s"}
    assert all(isinstance(v, float) and v >= 0 for v in figures.values())


def test_disk_reads_since_counts_the_faults_and_mebibytes_between_two_readings() -> None:
    before, after = DiskReads(major_faults=7, read_bytes=3 * 2**20), DiskReads(12, 8 * 2**20)
    assert after.since(before) == {"major_faults": 5, "disk_read_mb": 5.0}
    # a kernel without /proc/self/io: the faults still count, the bytes are unknown, not 0
    assert DiskReads(9, None).since(before) == {"major_faults": 2, "disk_read_mb": None}


def test_the_warm_up_build_is_timed_and_shares_no_id_with_the_measured_passages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up builds its own passages (seed 3; the build's are seed 1, the add's
    seed 2), so a process that kept an id of it could not mistake it for a measured one."""
    from benchmarks import scale
    from shared_core import ConceptGraphConfig, HashingEmbedder

    monkeypatch.setattr(scale, "WARM_UP_PASSAGES", 6)
    pool = ["Ada met Babbage.", "The engine ran.", "Cards were punched.", "Turin heard."]
    built: list[list[str]] = []
    real = scale.passages

    def recorded(*args: object, **kwargs: object) -> tuple[list[str], list[str]]:
        ids, texts = real(*args, **kwargs)  # type: ignore[arg-type]
        built.append(ids)
        return ids, texts

    monkeypatch.setattr(scale, "passages", recorded)
    seconds = scale.warm_up_build(pool, HashingEmbedder(32), ConceptGraphConfig())
    assert seconds > 0 and len(built) == 1 and len(built[0]) == 6
    measured = real(pool, 6, seed=1)[0] + real(pool, 6, seed=2)[0]
    assert not set(built[0]) & set(measured)


def sealed_rows(store: Any, client: Any, collection: str, rows: int) -> None:
    """``rows`` random unit vectors written to ``store`` and sealed: the server indexes
    them in the background, and reports them pending until it is done."""
    from shared_core.search.external import row_key, text_digest

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((rows, 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keys = [row_key(f"c{i}", text_digest(f"c{i}"), "s", 0) for i in range(rows)]
    store.upsert(keys, vectors, ["text"] * rows,
                 [{"chunk_id": f"c{i}", "part": 0} for i in range(rows)])
    client.flush(collection)


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_timed_pass_on_a_server_waits_until_every_sealed_row_is_indexed(
        tmp_path: Path) -> None:
    from benchmarks.scale import Engine, TimedStore, settled, wait_for_index
    from shared_core.search.milvus import MilvusVectorStore
    from tests.shared_core.search.milvus_server import database_client, milvus_server_uri

    client = database_client(tmp_path)
    stores = {name: MilvusVectorStore(milvus_server_uri(), name, index_type="HNSW",
                                      index_params={"M": 8, "efConstruction": 200},
                                      client=client) for name in ("waited", "settled")}
    # 6,000 rows in one sealed segment each: far more than an instant's indexing
    sealed_rows(stores["waited"], client, "waited", 6000)
    waited = wait_for_index(TimedStore(stores["waited"]), poll_s=0.05)
    described = client.describe_index("waited", "vector")
    # the moment it returns, every row is indexed: none left to a brute-force search
    assert (described["pending_index_rows"], described["indexed_rows"]) == (0, 6000)
    assert waited >= 0.0
    # before a timed pass: the rows found waiting are reported, and waited for ...
    sealed_rows(stores["settled"], client, "settled", 6000)
    server = Engine(backend="milvus")
    found = settled(TimedStore(stores["settled"]), server, poll_s=0.05)
    assert found is not None and found["pending_index_rows"] == 6000
    assert client.describe_index("settled", "vector")["pending_index_rows"] == 0
    # ... and once indexed, nothing is waited for
    assert settled(TimedStore(stores["settled"]), server) == {"pending_index_rows": 0,
                                                              "waited_s": 0.0}
    # a backend in this process, or none, has no server to wait for
    assert settled(TimedStore(stores["settled"]), Engine(backend="milvus-lite")) is None
    assert settled(None, server) is None
    for store in stores.values():
        store.close()
