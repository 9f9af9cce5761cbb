"""A stand-in for the *LLM* in TERAG tests: it reads the batch out of the prompt and
answers each passage from a table, the way a well-behaved model would."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from shared_core.llm import Message

# text -> (entities, concepts), as a model would write them (not normalised)
Answers = Mapping[str, tuple[str, str]]
_PASSAGE = re.compile(r"=== Passage (\d+) ===\n(.*?)(?=\n\n=== Passage |\Z)", re.DOTALL)


def batch_texts(messages: Sequence[Message]) -> list[str]:
    """The passages of one extraction prompt, in order (the example passages excluded)."""
    batch = messages[-1].content.rsplit("Write nothing else.\n\n", 1)[1]
    return [text for _, text in _PASSAGE.findall(batch)]


def well_formed(answers: Answers) -> Callable[[Sequence[Message]], str]:
    """A ScriptedChat function: one complete block per passage, for the labels asked for."""

    def reply(messages: Sequence[Message]) -> str:
        prompt = messages[-1].content
        wanted = [label for label in ("ENTITIES", "CONCEPTS") if f"- {label} are" in prompt]
        blocks = []
        for i, text in enumerate(batch_texts(messages), 1):
            fields = dict(zip(("ENTITIES", "CONCEPTS"), answers[text], strict=True))
            blocks.append("\n".join([f"Passage {i}:", *(f"{k}: {fields[k]}" for k in wanted)]))
        return "\n\n".join(blocks)

    return reply
