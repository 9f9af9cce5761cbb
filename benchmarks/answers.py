"""Answers generated from each method's context, scored by EM/F1: one fixed prompt, any LLM.

Only when an LLM is configured (``--llm-model``, ``--llm-base-url``); otherwise
the result says these figures were not measured. The prompt is fixed so methods
differ only by their context; the model answers at temperature 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared_core.llm import (
    ChatModel,
    LLMRunner,
    Message,
    OpenAIChat,
    RetryPolicy,
    TokenLedger,
    reply_text,
)

from .metrics import exact_match, token_f1
from .structural import GRAMMARS, PIPELINE_GRAMMARS, GrammarByPrompt, Purpose

LLM_CACHE = Path(__file__).resolve().parent / "cache" / "llm"

ANSWER_PROMPT = (
    "Answer the question using only the context below. Reply with the answer alone: "
    "a name, a date, a number or a short phrase, with no explanation.\n\n"
    "Context:\n{context}\n\nQuestion: {question}\nAnswer:"
)
NOT_MEASURED = ("not measured: no LLM configured (pass --llm-model and --llm-base-url, "
                "or set OPENAI_MODEL / OPENAI_BASE_URL)")


@dataclass(frozen=True)
class LLMSettings:
    """Which LLM answers and extracts, and on how many questions (answers cost calls).

    ``structural`` binds each prompt's replies to its format with a llama.cpp
    grammar (:mod:`.structural`): for checking the plumbing with a tiny local
    model, never for quality figures.
    """

    model: str
    base_url: str | None = None
    questions: int = 50
    max_answer_tokens: int = 32
    concurrency: int = 4
    timeout: float = 300.0
    structural: bool = False
    # HuixiangDou2's answer pipeline next to plain answers, for methods on our concept index
    pipeline: bool = True
    pipeline_budget: int = 1500
    # where the LLM methods keep what they extracted, so a rerun pays for nothing twice
    cache_dir: str = str(LLM_CACHE)

    def runner(self, purpose: Purpose = "answer",
               ledger: TokenLedger | None = None) -> LLMRunner:
        grammar = GRAMMARS[purpose] if self.structural else None
        chat: ChatModel
        if self.structural and purpose == "answer_pipeline":
            chat = GrammarByPrompt(self.model, self.base_url, PIPELINE_GRAMMARS,
                                   timeout=self.timeout)
        else:
            chat = OpenAIChat(self.model, base_url=self.base_url, timeout=self.timeout,
                              extra_body={"grammar": grammar} if grammar else None)
        return LLMRunner(chat, ledger=ledger, concurrency=self.concurrency,
                         timeout=self.timeout, retry=RetryPolicy(attempts=4, output_attempts=2),
                         progress=True)


def first_line(reply: str) -> str:
    """The answer part of a reply: its first non-empty line, without an "Answer:" prefix."""
    for line in reply.splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("Answer:").strip()
    return ""


def answer_scores(runner: LLMRunner, stage: str, questions: Sequence[str],
                  contexts: Sequence[str], answers: Sequence[Sequence[str]],
                  max_tokens: int) -> dict[str, Any]:
    """EM and F1 of the model's answers from the given contexts; failures counted, not hidden."""

    async def ask(i: int) -> str:
        prompt = ANSWER_PROMPT.format(context=contexts[i], question=questions[i])
        return await runner.acall(stage, [Message("user", prompt)], reply_text,
                                  max_tokens=max_tokens)

    outcomes = runner.map(list(range(len(questions))), ask, desc=f"answers ({stage})")
    predictions = [first_line(o.value) if o.ok and o.value is not None else ""
                   for o in outcomes]
    em = [exact_match(p, a) for p, a in zip(predictions, answers, strict=True)]
    f1 = [token_f1(p, a) for p, a in zip(predictions, answers, strict=True)]
    n = len(predictions)
    return {
        "questions": n,
        "em": sum(em) / n if n else None,
        "f1": sum(f1) / n if n else None,
        "failed_calls": sum(not o.ok for o in outcomes),
        "usage": runner.ledger.to_dict().get(stage, {}),
    }
