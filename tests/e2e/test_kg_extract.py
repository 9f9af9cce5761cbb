"""Our KG extractor and ``conceptgraph extract`` against a real llama.cpp server.

SmolLM2-135M rarely follows the record format on its own, so the tests pin
what the server may emit with llama.cpp's grammar option: records only, which
exercises the successful path for real (every call booked with the server's
usage, every chunk stored, a second run paying for nothing), or prose only,
which must stop the run with a clear error instead of building an empty KG.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_core.kg import ExtractionConfig, ExtractionStopped, KGStore, extract_kg
from shared_core.llm import LLMRunner, OpenAIChat, RetryPolicy

from .llama_server import MODEL_NAME, LlamaServer

# records only: the server's sampler cannot leave this grammar (llama.cpp GBNF)
RECORD_GRAMMAR = r'''
root ::= record ("##" record){0,2} "<|COMPLETE|>"
record ::= "(\"entity\"<|>" name "<|>" type "<|>" desc ")"
name ::= [A-Z] [a-z]{2,10} (" " [A-Z] [a-z]{2,10})?
type ::= "person" | "organization" | "location"
desc ::= [a-z]{2,10} (" " [a-z]{2,10}){0,5}
'''

CHUNKS = [
    ("c1", "Ada Lovelace worked with Charles Babbage in London."),
    ("c2", "The Analytical Engine was designed by Charles Babbage."),
    ("c3", "Alan Turing studied at King's College, Cambridge."),
]


def runner(server: LlamaServer, **chat: object) -> LLMRunner:
    llm = OpenAIChat(MODEL_NAME, base_url=server.url, timeout=120, **chat)  # type: ignore[arg-type]
    return LLMRunner(llm, concurrency=2, retry=RetryPolicy(attempts=2, output_attempts=1))


def test_grammar_bound_extraction_stores_every_chunk_and_resumes_free(
        llama_server: LlamaServer, tmp_path: Path) -> None:
    config = ExtractionConfig(max_tokens=96)
    first = runner(llama_server, extra_body={"grammar": RECORD_GRAMMAR})
    result = extract_kg(CHUNKS, first, tmp_path / "kg", config=config)
    assert set(result.done) == {"c1", "c2", "c3"} and not result.failed
    assert len(result.graph) >= 1
    usage = first.ledger["extract"]
    assert usage.calls == 3 and usage.calls_counted_locally == 0  # the server's own usage
    assert usage.input_tokens > 3 * 100  # the prompt template alone is longer
    assert 3 <= usage.output_tokens <= 3 * 96
    # a second run over the same chunks pays for nothing and rebuilds the same graph
    second = runner(llama_server, extra_body={"grammar": RECORD_GRAMMAR})
    again = extract_kg(CHUNKS, second, tmp_path / "kg", config=config)
    assert set(again.skipped_as_already_done) == {"c1", "c2", "c3"}
    assert second.ledger.total().calls == 0
    assert again.graph == result.graph
    assert KGStore(tmp_path / "kg").load_ledger()["extract"].calls == 3


def test_a_model_that_ignores_the_format_stops_the_run_with_a_clear_error(
        llama_server: LlamaServer, tmp_path: Path) -> None:
    config = ExtractionConfig(max_tokens=48, batch_size=2)
    prose = runner(llama_server, extra_body={"grammar": 'root ::= "Sure, here is a summary."'})
    with pytest.raises(ExtractionStopped, match="all 2 chunks of batch 1/2 failed"):
        extract_kg(CHUNKS, prose, tmp_path / "kg", config=config)
    assert prose.ledger["extract"].bad_outputs == {"unparsable": 2}
    assert len(KGStore(tmp_path / "kg")) == 0  # nothing stored, the third chunk never paid
