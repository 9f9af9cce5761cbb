"""TokenLedger: booking, totals, merging a resumed run, JSON round trip, the table."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from shared_core.llm import Completion, StageUsage, TokenLedger


def sample() -> TokenLedger:
    """extract: 2 calls (1,000 + 200 in, 200 + 100 out; the second counted locally), one
    retry, one empty reply; query: 1 call (50 in, 5 out, 10 cached), one failure."""
    ledger = TokenLedger()
    ledger.record("extract", Completion("x", 1000, 200, 0, "server"))
    ledger.record("extract", Completion("y", 200, 100, 0, "tiktoken"))
    ledger.record_retry("extract")
    ledger.record_bad_output("extract", "empty")
    ledger.record("query", Completion("z", 50, 5, 10, "server"))
    ledger.record_failure("query")
    return ledger


def test_booking_by_stage() -> None:
    ledger = sample()
    assert list(ledger) == ["extract", "query"]
    assert ledger["extract"] == StageUsage(calls=2, input_tokens=1200, output_tokens=300,
                                           cached_tokens=0, calls_counted_locally=1,
                                           retries=1, failures=0, bad_outputs={"empty": 1})
    assert ledger["query"] == StageUsage(calls=1, input_tokens=50, output_tokens=5,
                                         cached_tokens=10, failures=1)
    assert ledger["extract"].total_tokens == 1500
    assert "query" in ledger and "glean" not in ledger


def test_total_sums_every_stage() -> None:
    assert sample().total() == StageUsage(calls=3, input_tokens=1250, output_tokens=305,
                                          cached_tokens=10, calls_counted_locally=1,
                                          retries=1, failures=1, bad_outputs={"empty": 1})
    assert TokenLedger().total() == StageUsage()


def test_merged_adds_a_resumed_runs_earlier_spend() -> None:
    earlier = TokenLedger()
    earlier.record("extract", Completion("a", 10, 2, 1, "server"))
    earlier.record_bad_output("extract", "empty")
    earlier.record_bad_output("extract", "refusal")
    earlier.record("glean", Completion("b", 7, 3, 0, "tiktoken"))
    now = sample()
    merged = earlier.merged(now)
    assert list(merged) == ["extract", "glean", "query"]
    assert merged["extract"] == StageUsage(calls=3, input_tokens=1210, output_tokens=302,
                                           cached_tokens=1, calls_counted_locally=1,
                                           retries=1, bad_outputs={"empty": 2, "refusal": 1})
    assert merged["glean"] == StageUsage(calls=1, input_tokens=7, output_tokens=3,
                                         calls_counted_locally=1)
    assert merged["query"] == now["query"]
    # a new ledger: neither input changed, and nothing is shared with them
    assert earlier["extract"].calls == 1 and earlier["extract"].bad_outputs == {
        "empty": 1, "refusal": 1}
    assert now.to_dict() == sample().to_dict()
    merged.record_bad_output("query", "unparsable")
    assert now["query"].bad_outputs == {}


def test_json_round_trip(tmp_path: Path) -> None:
    ledger = sample()
    data = ledger.to_dict()
    assert data["query"] == {"calls": 1, "input_tokens": 50, "output_tokens": 5,
                             "cached_tokens": 10, "calls_counted_locally": 0, "retries": 0,
                             "failures": 1, "bad_outputs": {}}
    assert TokenLedger.from_dict(json.loads(json.dumps(data))).to_dict() == data
    path = tmp_path / "ledger.json"
    ledger.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]  # no .tmp left over
    loaded = TokenLedger.load(path)
    assert loaded.to_dict() == data and loaded.total() == ledger.total()
    # saving again replaces the file whole
    loaded.record_retry("query")
    loaded.save(path)
    assert TokenLedger.load(path)["query"].retries == 1


@pytest.mark.parametrize("data, message", [
    ([], "a token ledger must be a JSON object, got list"),
    ("extract", "a token ledger must be a JSON object, got str"),
    (None, "a token ledger must be a JSON object, got NoneType"),
    ({"extract": 3}, "ledger stage 'extract' must be an object"),
    ({"extract": [1, 2]}, "ledger stage 'extract' must be an object"),
    ({"extract": {"calls": 1, "dollars": 2}}, "ledger stage 'extract': .*dollars"),
])
def test_from_dict_refuses_what_is_not_a_ledger(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenLedger.from_dict(data)


def test_load_refuses_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"extract": {"calls": 1', encoding="utf-8")
    with pytest.raises(ValueError):  # json.JSONDecodeError is a ValueError
        TokenLedger.load(path)


@pytest.mark.parametrize("usage", [{"calls": "3"}, {"input_tokens": -5}, {"retries": 1.5},
                                   {"bad_outputs": ["empty"]}, {"bad_outputs": {"empty": "1"}}])
def test_from_dict_refuses_bad_values(usage: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TokenLedger.from_dict({"extract": usage})


def test_the_table_by_hand() -> None:
    lines = sample().table().splitlines()
    # widths: stage 7 (extract), bad outputs 11 (its header); numbers right-aligned
    assert lines == [
        "stage    calls  input  output  cached  total  retries  failures  bad outputs",
        "extract      2  1,200     300       0  1,500        1         0  empty 1",
        "query        1     50       5      10     55        0         1  -",
        "total        3  1,250     305      10  1,555        1         1  empty 1",
        "(1 of 3 calls had no usage from the server; their tokens were counted with "
        "tiktoken cl100k_base)",
    ]


def test_the_table_of_server_counted_calls_has_no_footnote() -> None:
    ledger = TokenLedger()
    ledger.record("ner", Completion("x", 1_234_567, 89, 0, "server"))
    assert ledger.table().splitlines() == [
        "stage  calls  input      output  cached  total      retries  failures  bad outputs",
        "ner        1  1,234,567      89       0  1,234,656        0         0  -",
        "total      1  1,234,567      89       0  1,234,656        0         0  -",
    ]


def test_booking_from_many_threads_loses_nothing() -> None:
    ledger = TokenLedger()

    def book() -> None:
        for _ in range(500):
            ledger.record("s", Completion("x", 3, 2, 1, "server"))
            ledger.record_retry("s")

    threads = [threading.Thread(target=book) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    u = ledger["s"]
    assert (u.calls, u.input_tokens, u.output_tokens, u.cached_tokens, u.retries) == (
        4000, 12000, 8000, 4000, 4000)
