"""HuixiangDou2's answer pipeline against plain retrieval + answer, on the same questions.

For a method built on our concept index (``g2cons``, and ``g2cons_kg`` with its KG),
the harness answers the same first ``--llm-questions`` questions twice: once
from the method's retrieved context with the fixed prompt (:mod:`.answers`),
and once through :class:`~shared_core.answer.AnswerPipeline` (logic form,
pre-check, dual-level fallback) with the same model and the same answer-form
instruction. Both are scored by the same EM/F1. The pipeline's record also
says which route each answer took, why the logic form was left, what each LLM
stage spent, and which answers failed, with their errors: nothing is dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from shared_core.answer import AnswerConfig, AnswerPipeline, AnswerTrace
from shared_core.index import ConceptGraphIndex
from shared_core.kg import KGRetriever
from shared_core.llm import TokenLedger

from .answers import LLMSettings, first_line
from .metrics import exact_match, token_f1

# the fixed prompt's answer form (:data:`.answers.ANSWER_PROMPT`), so EM/F1 compare alike
ANSWER_FORM = ("Reply with the answer alone: a name, a date, a number or a short phrase, "
               "with no explanation.")


def pipeline_inputs(retriever: Any) -> tuple[ConceptGraphIndex, KGRetriever | None] | None:
    """The concept index (and KG) a built method answers from, or None for other methods."""
    index = getattr(retriever, "index", None)
    if not isinstance(index, ConceptGraphIndex):
        return None
    fused = getattr(retriever, "fused", None)
    kg = getattr(fused, "kg", None)
    return index, kg if isinstance(kg, KGRetriever) else None


def left_at(trace: AnswerTrace) -> str | None:
    """Where the logic form was left: the stage and why (``decompose:unparsable``, ...)."""
    for stage in trace.stages:
        if stage.status in ("failed", "rejected"):
            return f"{stage.name}:{stage.error_kind or stage.status}"
    return None


def pipeline_scores(settings: LLMSettings, index: ConceptGraphIndex,
                    kg: KGRetriever | None, questions: Sequence[str],
                    answers: Sequence[Sequence[str]]) -> dict[str, Any]:
    """EM and F1 of the pipeline's answers, with routes, fallbacks, spend and failures."""
    ledger = TokenLedger()
    runner = settings.runner("answer_pipeline", ledger)
    config = AnswerConfig(budget=settings.pipeline_budget,
                          answer_max_tokens=settings.max_answer_tokens,
                          answer_instructions=ANSWER_FORM)
    pipeline = AnswerPipeline(runner, index, kg, config=config)
    traces: list[AnswerTrace | None] = [None] * len(questions)
    context_tokens: list[int] = []

    async def ask(i: int) -> str:
        # the pipeline answers every failure before the answer stage through its fallback;
        # what raises here is an answer stage that failed, counted below with its trace
        stream = pipeline.astream(questions[i])
        traces[i] = stream.trace
        async for _ in stream:
            pass
        answer = await stream.result()
        context_tokens.append(sum(piece.tokens for piece in answer.evidence))
        return answer.text

    outcomes = runner.map(list(range(len(questions))), ask, desc="answers (pipeline)")
    predictions = [first_line(o.value) if o.ok and o.value is not None else ""
                   for o in outcomes]
    n = len(predictions)
    em = [exact_match(p, a) for p, a in zip(predictions, answers, strict=True)]
    f1 = [token_f1(p, a) for p, a in zip(predictions, answers, strict=True)]
    done = [t for t in traces if t is not None and t.route is not None]
    routes = Counter(t.route for t in done)
    return {
        "questions": n,
        "em": sum(em) / n if n else None,
        "f1": sum(f1) / n if n else None,
        "failed_answers": sum(not o.ok for o in outcomes),
        "failures": [{"question": i, "kind": o.kind, "error": o.error}
                     for i, o in enumerate(outcomes) if not o.ok][:10],
        "routes": {route: routes.get(route, 0) / len(done) if done else None
                   for route in ("logic_form", "dual_level")},
        "left_logic_form_at": dict(Counter(r for t in done if (r := left_at(t)))),
        "keys_from_graph": sum(1 for t in done if (s := t.stage("keys")) is not None
                               and s.status == "fallback"),
        "context_tokens_mean": (sum(context_tokens) / len(context_tokens)
                                if context_tokens else None),
        "usage": ledger.to_dict(),
        "config": {"budget": config.budget, "key_budget": config.key_budget,
                   "step_budget": config.step_budget, "answer_form": ANSWER_FORM},
    }

