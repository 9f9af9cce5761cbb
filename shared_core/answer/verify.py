"""The pre-check verifier (HuixiangDou2's Algorithm 3): are the arguments there, before answering?

The judge sees the question and the gathered context (the logic-form history
and its evidence), not an answer: checking the arguments scored 0.745 against
checking the result's 0.715 in the paper, and costs no answer that may be
thrown away. ``SUPPORT`` lets the context through; ``REJECT`` sends the
pipeline to its fallback. No context at all is a rejection without a call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..llm import BadOutput, Completion, LLMRunner, Message, reply_text
from .prompts import VERIFY_SYSTEM

VERIFY_STAGE = "answer_precheck"
_SUPPORT = {"support", "supported", "supports", "yes", "sufficient", "enough"}
_REJECT = {"reject", "rejected", "unsupported", "no", "insufficient", "not"}
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Verdict:
    """The judge's decision and its reason (its own words, or why no judge was asked)."""

    supported: bool
    reason: str


def parse_verdict(text: str) -> Verdict:
    """SUPPORT or REJECT (or yes/no) as the reply's first word, any case or markup;
    :class:`~shared_core.llm.BadOutput` ``"not_a_verdict"`` for anything else.

    >>> parse_verdict("**REJECT** - the height of B is missing.")
    Verdict(supported=False, reason='**REJECT** - the height of B is missing.')
    """
    word = _WORD.search(text)
    first = word.group(0).casefold() if word else ""
    if first in _SUPPORT or first in _REJECT:
        return Verdict(first in _SUPPORT, " ".join(text.split())[:300])
    raise BadOutput("not_a_verdict", f"expected SUPPORT or REJECT, got {text[:60]!r}")


def verify_messages(query: str, context: str) -> list[Message]:
    return [Message("system", VERIFY_SYSTEM),
            Message("user", f"Question: {query}\n\nEvidence:\n{context}")]


async def precheck(runner: LLMRunner, query: str, context: str, *,
                   max_tokens: int | None = 48) -> Verdict:
    """Whether ``context`` holds what answering ``query`` needs; an empty or unusable
    reply is asked again, then :class:`~shared_core.llm.RequestFailed`."""
    if not context.strip():
        return Verdict(False, "no context was gathered")

    def parse(completion: Completion) -> Verdict:
        return parse_verdict(reply_text(completion))

    return await runner.acall(VERIFY_STAGE, verify_messages(query, context), parse,
                              max_tokens=max_tokens)
