"""The command line end to end on a tiny corpus with the hashing embedder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.faults import swap_concept_vectors
from shared_core import ConceptGraphIndex
from shared_core.cli import format_table, main
from shared_core.embeddings import resolve_embedder
from shared_core.embeddings.models import MINILM_MODEL_ID
from shared_core.store import CorruptIndexError, index_folder, read_manifest

PASSAGES = [
    {"id": "p1", "title": "Ada", "text": "Ada Lovelace wrote the first computer program."},
    {"id": "p2", "title": "Babbage", "text": "Charles Babbage designed the Analytical Engine."},
    {"id": "p3", "title": "", "text": "The Analytical Engine was a mechanical computer."},
    {"id": "p4", "title": "", "text": "Lovelace translated an article about the engine."},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    return path


def build(corpus: Path, out: Path, *extra: str) -> int:
    return main(["build", str(corpus), "--out", str(out), "--embedder", "hashing", "--quiet",
                 *extra])


def test_build_then_stats_select_query(corpus: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    assert build(corpus, index_dir) == 0
    assert read_manifest(index_dir)["chunks"] == 4

    assert main(["stats", str(index_dir)]) == 0
    stats = capsys.readouterr().out
    assert "chunks" in stats and " 4" in stats  # four passages, four chunks

    kept = tmp_path / "core.jsonl"
    assert main(["select", str(index_dir), "--kappa", "0.5", "--by", "chunks",
                 "--out", str(kept)]) == 0
    report = capsys.readouterr().out
    # ceil(0.5 * 4) = 2 core chunks of 4
    lines = [json.loads(line) for line in kept.read_text().splitlines()]
    assert len(lines) == 2
    assert {line["id"] for line in lines} <= {"p1", "p2", "p3", "p4"}
    assert "construction-cost reduction" in report and "kappa=0.5 of chunks" in report
    # by tokens (the default): the kept texts hold at most half of all tokens
    assert main(["select", str(index_dir), "--kappa", "0.5", "--out", str(kept)]) == 0
    assert "kappa=0.5 of tokens" in capsys.readouterr().out
    index = ConceptGraphIndex.load(str(index_dir), resolve_embedder("hashing"))
    total = sum(index.get(i).tokens for i in index.chunk_ids)
    by_tokens = [json.loads(line)["id"] for line in kept.read_text().splitlines()]
    assert 0 < sum(index.get(i).tokens for i in by_tokens) <= total / 2

    assert main(["query", str(index_dir), "Who wrote the first computer program?",
                 "--json", "--budget", "40"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["chunks"], "a query sharing words with p1 must retrieve something"
    assert sum(c["tokens"] for c in answer["chunks"]) <= 40
    assert answer["chunks"][0]["provenance"]["stage"] == "direct"


def test_build_shows_its_progress_with_an_eta(corpus: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the stream is counted first, so the bar has a total; --quiet shows no bar
    assert main(["build", str(corpus), "--out", str(tmp_path / "a"), "--embedder",
                 "hashing"]) == 0
    err = capsys.readouterr().err
    assert "adding chunks" in err and "4/4" in err
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", err)  # tqdm's [elapsed<remaining
    assert build(corpus, tmp_path / "b") == 0
    assert "adding chunks" not in capsys.readouterr().err


def test_build_in_batches_of_one_writes_the_index_of_one_batch(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(corpus, tmp_path / "ones", "--batch-size", "1") == 0
    assert_same_index(corpus, tmp_path / "ones", tmp_path)
    assert build(corpus, tmp_path / "none", "--batch-size", "0") == 2
    assert "batch_size must be a positive int, got 0" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def assert_same_index(corpus: Path, sharded_path: Path, tmp_path: Path) -> None:
    """The index at ``sharded_path`` is the one a build in this process writes."""
    assert build(corpus, tmp_path / "local") == 0
    embedder = resolve_embedder("hashing")
    sharded = ConceptGraphIndex.load(str(sharded_path), embedder)
    local = ConceptGraphIndex.load(str(tmp_path / "local"), embedder)
    assert sharded.chunk_ids == local.chunk_ids and sharded.concepts == local.concepts
    assert sharded.edges == local.edges
    assert sharded.concept_pagerank() == pytest.approx(local.concept_pagerank(), abs=1e-6)


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_build_on_a_dask_cluster_writes_the_index_a_local_build_writes(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as cluster:
        assert build(corpus, tmp_path / "sharded", "--dask", cluster.scheduler_address) == 0
    out = capsys.readouterr().out
    assert f"on the Dask cluster at {cluster.scheduler_address}" in out
    # the workers embed: this process's count (none) is not reported as a cache's work
    assert "(sentences embedded on the cluster's workers)" in out and "from cache" not in out
    assert_same_index(corpus, tmp_path / "sharded", tmp_path)


RAY_PORT = 6390  # the test cluster's head (Ray's default, 6379, may be another's)


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_build_on_a_ray_cluster_writes_the_index_a_local_build_writes(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    # a cluster of its own, started as a user starts one, with a short folder for its
    # sockets (a path of over 107 bytes cannot be one)
    ray_cli = str(Path(sys.executable).parent / "ray")
    sessions = tempfile.mkdtemp(prefix="cg-ray-")
    # Ray 2.5x's `ray start` turns token authentication on; a test cluster on loopback
    # goes without (a user's cluster with it needs its token where Ray looks for one)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    subprocess.run([ray_cli, "start", "--head", f"--port={RAY_PORT}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats",
                    f"--temp-dir={sessions}"], check=True, env=env, capture_output=True)
    try:
        assert not ray.is_initialized()  # so the build joins the cluster at the address
        address = f"127.0.0.1:{RAY_PORT}"
        assert build(corpus, tmp_path / "sharded", "--ray", address) == 0
        assert not ray.is_initialized()  # it left the cluster, which runs on
    finally:
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(sessions, ignore_errors=True)
    assert f"on the Ray cluster at {address}" in capsys.readouterr().out
    assert_same_index(corpus, tmp_path / "sharded", tmp_path)


def test_build_takes_one_cluster_and_minilms_precision_only(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build(corpus, tmp_path / "both", "--dask", "tcp://a:8786", "--ray", "b:6379")
    assert "not allowed with argument" in capsys.readouterr().err
    assert build(corpus, tmp_path / "hashing", "--precision", "fp32") == 2
    assert ("conceptgraph: error: precision='fp32' is MiniLM's; the hashing embedder has one"
            in capsys.readouterr().err)
    assert not (tmp_path / "both").exists() and not (tmp_path / "hashing").exists()
    # MiniLM in fp32 on any CPU, bf16 or not: the index records the precision it was built in
    assert build(corpus, tmp_path / "fp32", "--embedder", "minilm", "--precision", "fp32") == 0
    assert read_manifest(tmp_path / "fp32")["embedding_model"] == MINILM_MODEL_ID


def test_build_spills_to_the_folder_given_or_names_a_missing_one(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    assert build(corpus, tmp_path / "spilled", "--spill-dir", str(spill)) == 0
    # this corpus is far below the spill's 256 MB: what the flag changes here is which folder
    # is checked (a missing one fails below); spilling itself is tested in state/test_spill.py
    assert list(spill.iterdir()) == []
    assert build(corpus, tmp_path / "plain") == 0
    embedder = resolve_embedder("hashing")
    spilled = ConceptGraphIndex.load(str(tmp_path / "spilled"), embedder)
    plain = ConceptGraphIndex.load(str(tmp_path / "plain"), embedder)
    assert spilled.chunk_ids == plain.chunk_ids and spilled.edges == plain.edges
    capsys.readouterr()
    assert build(corpus, tmp_path / "never", "--spill-dir", str(tmp_path / "missing")) != 0
    assert "missing' is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_titles_are_prepended_and_metadata_kept(corpus: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    build(corpus, index_dir)
    assert main(["select", str(index_dir), "--kappa", "1.0", "--out",
                 str(tmp_path / "all.jsonl")]) == 0
    rows = {json.loads(x)["id"]: json.loads(x) for x in
            (tmp_path / "all.jsonl").read_text().splitlines()}
    assert rows["p1"]["text"] == "Ada\nAda Lovelace wrote the first computer program."
    assert rows["p3"]["text"] == "The Analytical Engine was a mechanical computer."
    assert rows["p2"]["source_id"] == "p2" and rows["p2"]["title"] == "Babbage"


def test_build_with_token_windows(corpus: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert build(corpus, tmp_path / "idx", "--chunk-tokens", "12", "--overlap", "2") == 0
    out = capsys.readouterr().out
    assert "chunk" in out


def test_config_knobs_from_the_command_line(corpus: Path, tmp_path: Path) -> None:
    assert build(corpus, tmp_path / "idx", "--set", "theta_co=1", "--set", "top_k=3") == 0
    manifest = read_manifest(tmp_path / "idx")
    assert manifest["config"]["theta_co"] == 1 and manifest["config"]["top_k"] == 3


@pytest.mark.parametrize("argv, message", [
    (["--set", "theta_co=0"], "theta_co"),
    (["--set", "nonsense=1"], "unknown config keys: nonsense"),
    (["--set", "no_equals_sign"], "key=value"),
])
def test_bad_arguments_are_clear_errors(corpus: Path, tmp_path: Path, argv: list[str],
                                        message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert build(corpus, tmp_path / "idx", *argv) == 2
    assert message in capsys.readouterr().err


def test_missing_corpus_and_not_an_index(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert build(tmp_path / "nope.jsonl", tmp_path / "idx") == 2
    assert "corpus not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["stats", str(tmp_path / "empty")]) == 2
    assert "not a conceptgraph index" in capsys.readouterr().err
    assert issubclass(CorruptIndexError, ValueError)  # why the CLI can report it as above


@pytest.mark.parametrize("content, message", [
    (b'{"id": null, "text": "a"}\n',
     "c.jsonl:1: 'id' must be a non-empty string or an integer, got None"),
    (b'{"text": "ok"}\n{"title": ["x"], "text": "a"}\n',
     "c.jsonl:2: 'title' must be a string or null, got list ['x']"),
    (b'{"text": "lone \\ud800"}\n',
     "c.jsonl:1: field 'text' contains a lone surrogate (U+D800) at character 5"),
    (b'{"text": "ok"}\n{"text": "caf\xe9"}\n', "c.jsonl:2: not valid UTF-8"),
])
def test_bad_corpus_lines_are_reported_with_file_and_line(
        tmp_path: Path, content: bytes, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(content)
    assert build(corpus, tmp_path / "idx") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"conceptgraph: error: {corpus}") and message in err
    assert not (tmp_path / "idx").exists()


def test_duplicate_ids_across_corpus_files(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"id": "p1", "text": "One."}) + "\n")
    (folder / "b.jsonl").write_text(json.dumps({"id": "p1", "text": "Two."}) + "\n")
    assert build(folder, tmp_path / "idx") == 2
    assert (f"conceptgraph: error: {folder / 'b.jsonl'}:1: duplicate id 'p1' "
            f"(first at {folder / 'a.jsonl'}:1)") in capsys.readouterr().err


def test_format_table_aligns_numbers_right() -> None:
    table = format_table(("name", "n"), [("a", 5), ("bb", 1234)])
    lines = table.splitlines()
    assert lines[0] == "name      n"
    assert lines[2] == "a         5"
    assert lines[3] == "bb    1,234"


def test_stats_json_is_one_object_with_every_stat(corpus: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    assert build(corpus, index_dir) == 0
    capsys.readouterr()
    assert main(["stats", str(index_dir), "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1  # nothing but the object on stdout
    stats = json.loads(out)
    assert stats == ConceptGraphIndex.load(str(index_dir), resolve_embedder("hashing")).stats()
    # four one-sentence passages (a title line without a full stop joins its sentence)
    assert (stats["chunks"], stats["sentences"]) == (4, 4)
    assert stats["embedding_model"] == "hashing-bow-256" and stats["embedding_dim"] == 256
    assert isinstance(stats["warnings"], list)


def test_select_json_is_one_object_with_the_report_and_kept_ids(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    assert build(corpus, index_dir, "--set", "theta_co=1") == 0
    capsys.readouterr()
    kept = tmp_path / "core.jsonl"
    assert main(["select", str(index_dir), "--kappa", "0.5", "--by", "chunks",
                 "--prompt-tokens", "100", "--out", str(kept), "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and err == ""  # theta_co=1 gives edges: no warning
    answer = json.loads(out)
    assert set(answer) == {"report", "kept_ids", "out"} and answer["out"] == str(kept)
    report = answer["report"]
    # ceil(0.5 · 4) = 2 of the 4 chunks; the extractor reads their tokens plus 100 each
    assert (report["kappa"], report["by"], report["chunks_total"], report["chunks_kept"],
            report["chunks_dropped"]) == (0.5, "chunks", 4, 2, 2)
    assert report["extraction_input_tokens"] == report["tokens_kept"] + 2 * 100
    assert report["extraction_input_tokens_all"] == report["tokens_total"] + 4 * 100
    assert report["cost_reduction"] == pytest.approx(
        1 - report["extraction_input_tokens"] / report["extraction_input_tokens_all"])
    assert report["graph_edges"] > 0 and report["warnings"] == []
    written = [json.loads(line)["id"] for line in kept.read_text().splitlines()]
    assert answer["kept_ids"] == written and len(written) == 2
    index = ConceptGraphIndex.load(str(index_dir), resolve_embedder("hashing"))
    assert report["tokens_kept"] == sum(index.get(i).tokens for i in written)
    assert report["graph_edges"] == index.stats()["edges"]


def test_select_method_and_query_min_score_reach_the_index(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    assert build(corpus, index_dir, "--set", "theta_co=1") == 0
    index = ConceptGraphIndex.load(str(index_dir), resolve_embedder("hashing"))
    for method in ("knn", "random"):
        capsys.readouterr()
        assert main(["select", str(index_dir), "--kappa", "0.5", "--by", "chunks",
                     "--method", method, "--seed", "3", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        expected = index.select(0.5, method=method, by="chunks", seed=3)  # type: ignore[arg-type]
        assert answer["kept_ids"] == list(expected.kept_ids)
    # a floor above every similarity: the question gets no context at all
    capsys.readouterr()
    assert main(["query", str(index_dir), "Who wrote the first program?", "--json",
                 "--min-score", "0.999"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == []
    assert main(["query", str(index_dir), "Who wrote the first program?", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"]


def test_stats_verify_derives_the_graph_again_and_fails_on_a_forged_save(
        corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index_dir = tmp_path / "idx"
    assert build(corpus, index_dir, "--set", "theta_co=1") == 0
    assert main(["stats", str(index_dir), "--verify"]) == 0
    swap_concept_vectors(index_folder(index_dir))
    capsys.readouterr()
    assert main(["stats", str(index_dir)]) == 0  # the values rest on the checksum
    assert main(["stats", str(index_dir), "--verify"]) == 2
    assert "concept vectors are not the means of their sentences" in capsys.readouterr().err
