"""Chunks and model replies for the KG tests, with the expected records worked out by hand.

Chunk ``i`` says that ``Person{i}`` met ``Shared Person`` at ``Place{i}``; the
scripted model's reply declares those three entities and two relations, so the
merged graph of ``n`` chunks has ``2n + 1`` entities and ``2n`` relations, and
``Shared Person`` is named by every chunk.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared_core.llm import LLMRunner, Message, RetryPolicy, TokenLedger
from tests.shared_core.llm.scripted import RecordedSleep, ScriptedChat

RETRY = RetryPolicy(attempts=2, output_attempts=2, base_delay=0.0, jitter=False)


def entity(name: str, etype: str, description: str) -> str:
    return f'("entity"<|>{name}<|>{etype}<|>{description})'


def relation(source: str, target: str, description: str, strength: object) -> str:
    return f'("relationship"<|>{source}<|>{target}<|>{description}<|>{strength})'


def reply(*records: str) -> str:
    """A well-formed reply: records joined by ``##`` and new lines, then the marker."""
    return "##\n".join(records) + "\n<|COMPLETE|>"


def chunk_text(i: int) -> str:
    return f"Chunk {i}. Person{i} met Shared Person at Place{i}."


def chunks(n: int) -> list[tuple[str, str]]:
    return [(f"c{i}", chunk_text(i)) for i in range(1, n + 1)]


def reply_for_chunk(i: int) -> str:
    return reply(entity(f"Person{i}", "person", f"Someone from chunk {i}"),
                 entity("Shared Person", "person", f"Met Person{i}"),
                 entity(f"Place{i}", "location", f"Where chunk {i} happens"),
                 relation(f"Person{i}", "Shared Person", "They met", 7),
                 relation(f"Person{i}", f"Place{i}", "Was there", 5))


def chunk_number(text: str) -> int:
    found = re.match(r"Chunk (\d+)\.", text)
    if found is None:
        raise AssertionError(f"not a test chunk: {text!r}")
    return int(found.group(1))


def by_chunk(messages: Sequence[Message]) -> str:
    """A ScriptedChat function: the first extraction reply for the chunk being asked about."""
    return reply_for_chunk(chunk_number(messages[1].content))


def asked_chunks(model: ScriptedChat) -> list[int]:
    """Which chunks the model was called for, in call order."""
    return [chunk_number(call[1].content) for call in model.calls]


def runner(model: ScriptedChat, *, concurrency: int = 1) -> LLMRunner:
    return LLMRunner(model, ledger=TokenLedger(), retry=RETRY, concurrency=concurrency,
                     sleep=RecordedSleep())
