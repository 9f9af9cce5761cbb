"""``conceptgraph extract`` and ``query --kg`` end to end, against a local OpenAI-compatible stub.

The stub is a real HTTP server; the ``openai`` client, the runner, the store and
the CLI all run as they would against vLLM or OpenAI. Its replies are records
built from the chunk text in the request, so expected entities follow by hand.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared_core.cli import main
from shared_core.kg import BASE_CONTINUE_PROMPT, CONTINUE_PROMPT, JUDGE_PROMPT, KGStore
from tests.shared_core.kg.processes import HOLD, Child
from tests.shared_core.openai_stub import StubOpenAI
from tests.shared_core.test_cli import PASSAGES, build

loopback = pytest.mark.allow_hosts(["127.0.0.1"])


def records_for(body: dict[str, Any]) -> str:
    """One entity per capitalised word pair of the chunk the request carries."""
    text = body["messages"][-1]["content"]
    names = re.findall(r"\b([A-Z][a-z]+ [A-Z][a-z]+)\b", text) or ["Engine"]
    return "##".join(f'("entity"<|>{n}<|>concept<|>named in the text)' for n in names) \
        + "<|COMPLETE|>"


def gleaning_records_for(body: dict[str, Any]) -> str:
    """As :func:`records_for`, but the judge says NO and a request for more finds one entity."""
    last = body["messages"][-1]["content"]
    if last == JUDGE_PROMPT:
        return "NO"
    if last in (BASE_CONTINUE_PROMPT, CONTINUE_PROMPT):
        return '("entity"<|>Second Look<|>concept<|>found when asked again)##<|COMPLETE|>'
    return records_for(body)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    out = tmp_path / "idx"
    assert build(corpus, out, "--set", "theta_co=1") == 0
    return out


def extract(index_dir: Path, stub: StubOpenAI, *extra: str) -> int:
    return main(["extract", str(index_dir), "--kappa", "0.5", "--by", "chunks",
                 "--model", "stub-model", "--base-url", stub.url, "--quiet", *extra])


@loopback
def test_extract_prices_first_then_stores_every_core_chunk_and_resumes_free(
        index_dir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with StubOpenAI(chat=records_for) as stub:
        assert extract(index_dir, stub, "--yes", "--price-in", "1", "--price-out", "2") == 0
        out = capsys.readouterr().out
        calls = len(stub.chat_bodies())
        # ceil(0.5 * 4) = 2 core chunks: one call each (no gleaning)
        assert calls == 2
        assert "core chunks: extract with stub-model: 2 calls" in out
        assert "every chunk: extract with stub-model: 4 calls" in out
        assert "2 chunks extracted, 0 already done, 0 failed" in out
        assert re.search(r"^extract\s+2\s", out, re.M)  # the ledger's row
        assert "of the estimate" in out and "~$" in out
        store = KGStore(index_dir / "kg")
        assert len(store) == 2
        assert store.load_ledger()["extract"].calls == 2
        # again: nothing is paid twice
        assert extract(index_dir, stub, "--yes") == 0
        assert len(stub.chat_bodies()) == calls
        assert "2 of 2 core chunks are already extracted" in capsys.readouterr().out


@loopback
def test_extract_asks_before_spending(index_dir: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with StubOpenAI(chat=records_for) as stub:
        monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
        assert extract(index_dir, stub) == 2  # not a terminal: refuse rather than guess
        assert "pass --yes" in capsys.readouterr().err
        monkeypatch.setattr("sys.stdin", _Tty("n\n"))
        assert extract(index_dir, stub) == 1
        assert "nothing extracted" in capsys.readouterr().out
        assert stub.chat_bodies() == []  # the estimate cost nothing


@loopback
def test_select_with_a_model_estimates_what_extract_estimates(
        index_dir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """select prices the same prompt extract sends with each chunk: the same estimate."""
    def estimates(out: str) -> list[str]:
        return re.findall(r"^(?:core chunks|every chunk): .*$", out, re.M)

    select = ["select", str(index_dir), "--kappa", "0.5", "--by", "chunks",
              "--model", "stub-model"]
    assert main(select) == 0
    selected = estimates(capsys.readouterr().out)
    with StubOpenAI(chat=records_for) as stub:
        monkeypatch.setattr("sys.stdin", _Tty("n\n"))
        assert extract(index_dir, stub) == 1
        assert stub.chat_bodies() == []
    assert len(selected) == 2 and estimates(capsys.readouterr().out) == selected
    # without a prompt the chunks alone are priced: fewer input tokens
    assert main([*select, "--prompt-tokens", "0"]) == 0
    unprompted = estimates(capsys.readouterr().out)
    tokens = [int(re.search(r"~([\d,]+) input", line).group(1).replace(",", ""))  # type: ignore[union-attr]
              for line in (*selected, *unprompted)]
    assert tokens[2] < tokens[0] and tokens[3] < tokens[1]


@loopback
def test_a_kg_of_another_setup_is_refused_with_the_command_line_s_way_out(
        index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with StubOpenAI(chat=gleaning_records_for) as stub:
        assert extract(index_dir, stub, "--yes") == 0
        calls = len(stub.chat_bodies())
        capsys.readouterr()
        assert extract(index_dir, stub, "--yes", "--gleanings", "1") == 2
        err = capsys.readouterr().err
        assert "holds KG results of another setup" in err and "max_gleanings" in err
        assert "--restart discards the stored results" in err
        assert "--kg-dir DIR extracts into another directory" in err
        assert len(stub.chat_bodies()) == calls  # refused before any call
        other = index_dir.parent / "kg_gleaned"
        assert extract(index_dir, stub, "--yes", "--gleanings", "1", "--kg-dir",
                       str(other)) == 0
    assert len(KGStore(other)) == len(KGStore(index_dir / "kg")) == 2


@loopback
def test_restart_asks_before_it_deletes_and_a_no_keeps_the_results(
        index_dir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with StubOpenAI(chat=records_for) as stub:
        assert extract(index_dir, stub, "--yes") == 0
        monkeypatch.setattr("sys.stdin", _Tty("n\n"))
        assert extract(index_dir, stub, "--restart") == 1
        assert "nothing deleted" in capsys.readouterr().out
        assert len(KGStore(index_dir / "kg")) == 2  # still there, unpaid for again
        # yes to deleting, yes to spending: both core chunks are asked for again
        monkeypatch.setattr("sys.stdin", _Tty("y\ny\n"))
        assert extract(index_dir, stub, "--restart") == 0
        assert len(stub.chat_bodies()) == 4 and len(KGStore(index_dir / "kg")) == 2


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@loopback
def test_query_fuses_the_concept_path_with_the_extracted_kg(
        index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with StubOpenAI(chat=records_for) as stub:
        assert main(["extract", str(index_dir), "--kappa", "1", "--by", "chunks", "--model",
                     "stub-model", "--base-url", stub.url, "--quiet", "--yes"]) == 0
    capsys.readouterr()
    assert main(["query", str(index_dir), "--kg", "--json", "--budget", "200",
                 "Who is Charles Babbage?"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    items = json.loads(line)["items"]
    # "Charles Babbage" is an entity of p2 only, and p2 is the concept path's match too
    assert items[0]["id"] == "p2" and items[0]["path"] == "both"
    assert sum(i["tokens"] for i in items) <= 200


def test_query_kg_without_an_extraction_says_what_to_run(
        index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(index_dir), "--kg", "anything"]) == 2
    assert "run conceptgraph extract" in capsys.readouterr().err


@loopback
@pytest.mark.parametrize(("mode", "other", "per_chunk_estimate", "per_chunk_run"), [
    # 2 rounds priced at their upper bound: base 2 * 2 calls, trial 1 + 2 * 2; run with a
    # judge that says NO: base extract + more + judge, trial extract + judge
    ("base", "trial", 4, 3),
    ("trial", "base", 5, 2),
])
def test_extract_gleaning_mode_sets_the_estimate_the_calls_and_the_store(
        index_dir: Path, capsys: pytest.CaptureFixture[str], mode: str, other: str,
        per_chunk_estimate: int, per_chunk_run: int) -> None:
    with StubOpenAI(chat=gleaning_records_for) as stub:
        assert extract(index_dir, stub, "--yes", "--gleanings", "2", "--gleaning-mode",
                       mode) == 0
        out = capsys.readouterr().out
        # 2 core chunks of 4
        assert f"core chunks: extract+glean with stub-model: {2 * per_chunk_estimate} " \
            "calls" in out
        assert f"every chunk: extract+glean with stub-model: {4 * per_chunk_estimate} " \
            "calls" in out
        asked = [b["messages"][-1]["content"] for b in stub.chat_bodies()]
        assert len(asked) == 2 * per_chunk_run
        assert asked.count(JUDGE_PROMPT) == 2
        assert asked.count(BASE_CONTINUE_PROMPT) == (2 if mode == "base" else 0)
        assert CONTINUE_PROMPT not in asked
        store = KGStore(index_dir / "kg")
        assert store.manifest.settings["gleaning_mode"] == mode  # type: ignore[union-attr]
        ledger = store.load_ledger()
        assert (ledger["extract"].calls, ledger["glean"].calls) == (2, 2 * per_chunk_run - 2)
        assert re.search(rf"^glean\s+{2 * per_chunk_run - 2}\s", out, re.M)

        # the same KG directory in the other mode: refused by name, nothing asked
        assert extract(index_dir, stub, "--yes", "--gleanings", "2", "--gleaning-mode",
                       other) == 2
        err = capsys.readouterr().err
        assert f"gleaning_mode: '{mode}' (stored) vs '{other}' (this run)" in err
        assert len(stub.chat_bodies()) == 2 * per_chunk_run


def test_extract_refuses_an_unknown_gleaning_mode(
        index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["extract", str(index_dir), "--gleaning-mode", "greedy", "--model", "m"])
    assert exited.value.code == 2
    assert "--gleaning-mode: invalid choice: 'greedy'" in capsys.readouterr().err


@loopback
def test_extract_is_refused_while_another_process_extracts_into_the_kg_dir(
        index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with StubOpenAI(chat=records_for) as stub, Child(HOLD, str(index_dir / "kg")) as holder:
        holder.expect("locked")
        assert extract(index_dir, stub, "--yes") == 2
        err = capsys.readouterr().err
        assert f"conceptgraph: error: {index_dir / 'kg'} is locked for writing: another " \
            f"process (pid {holder.pid} " in err
        assert stub.chat_bodies() == []  # refused before anything was paid for
        holder.say()
        holder.expect("released")
        assert extract(index_dir, stub, "--yes") == 0
        assert len(stub.chat_bodies()) == 2
