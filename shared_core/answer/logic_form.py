"""Logic-form retrieval (HuixiangDou2's Algorithm 1): decompose, run each step, keep the history.

The LLM writes the query as numbered steps, each with an operator from a small
documented set (:data:`OPERATORS`); a step may use earlier answers as
``{stepN}``. Each step runs in order:

- ``retrieve``: a sub-question; its evidence is gathered from the graphs (as a
  low-level key, :class:`~.dual_level.DualLevelRetriever`) and the LLM answers
  it in a few words from that evidence (or UNKNOWN);
- ``filter``: ``{stepN} | condition``: the items of an earlier list that meet
  the condition; a numeric condition (``> 1900``) is checked here, any other is
  judged by the LLM over the evidence, and only items of the list survive;
- ``count``: ``{stepN}``: how many items an earlier step listed (here);
- ``compare`` and ``compute``: an expression over earlier answers' numbers,
  evaluated here by :mod:`.arithmetic`, never by the LLM.

The result is the history of (sub-query, operator, result) and the evidence
the steps gathered. What goes wrong is an error with a kind, for the trace
and the fallback: a reply that is not steps (``unparsable``), an
``unknown_operator``, a reference to a step not before it
(``missing_reference``), a step whose input has no answer (``missing_answer``),
or no number where arithmetic needs one (``no_number``, ``bad_expression``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ..checks import check_count
from ..llm import BadOutput, Completion, LLMRunner, Message, reply_text
from .arithmetic import ExpressionError, evaluate, first_number, format_value
from .dual_level import DualLevelRetriever
from .evidence import Evidence, unique
from .prompts import FILTER_SYSTEM, STEP_SYSTEM, decompose_system, question_with_context

Operator = Literal["retrieve", "filter", "compare", "count", "compute"]
OPERATORS: Mapping[str, str] = {
    "retrieve": "look a sub-question up in the graphs; the LLM answers it from the evidence",
    "filter": "{stepN} | condition: the items of an earlier list meeting a condition",
    "count": "{stepN}: how many items an earlier step listed (computed here)",
    "compare": "an expression comparing earlier numbers, e.g. {step1} > {step2} (computed here)",
    "compute": "arithmetic on earlier numbers, e.g. {step1} - {step2} (computed here)",
}
DECOMPOSE_STAGE = "answer_decompose"
STEP_STAGE = "answer_step"
UNKNOWN = "UNKNOWN"

_STEP_LINE = re.compile(r"^\s*(?:[-*]\s*)?(?:\*\*)?(?:step\s*)?(\d+)\s*[.):]\s*(?:\*\*)?\s*"
                        r"([A-Za-z_]+)\s*(?:\*\*)?\s*:\s*(.+?)\s*$", re.IGNORECASE)
_REFERENCE = re.compile(r"\{\s*step[\s_]*(\d+)\s*\}", re.IGNORECASE)
_ITEM_SPLIT = re.compile(r"\s*(?:[,;\n]|\band\b)\s*")
_NUMERIC_CONDITION = re.compile(r"^\s*(<=|>=|==|!=|<|>|=)\s*([-+]?\d[\d,]*(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class Step:
    """One step as the LLM wrote it: its number, operator, text and the steps it uses."""

    number: int
    operator: Operator
    text: str
    references: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.number}. {self.operator}: {self.text}"


@dataclass(frozen=True)
class StepResult:
    """A step run: its text with earlier answers filled in, its result, its evidence.

    ``answer`` is ``None`` when a retrieve step's evidence did not say (UNKNOWN)
    or a filter kept nothing; ``value`` is the number, truth or items the
    step computed, when it computed one.
    """

    step: Step
    query: str
    answer: str | None
    value: float | bool | tuple[str, ...] | None = None
    evidence: tuple[Evidence, ...] = ()

    @property
    def result(self) -> str:
        return self.answer if self.answer is not None else UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step.number, "operator": self.step.operator,
                "sub_query": self.query, "result": self.result,
                "evidence": [e.chunk_id for e in self.evidence]}


@dataclass(frozen=True)
class LogicFormResult:
    """The history of a decomposed query: every step's (sub-query, operator, result)."""

    steps: tuple[StepResult, ...]
    evidence: tuple[Evidence, ...] = field(default=())

    def history(self) -> str:
        """The steps as the answer prompt shows them, one per line."""
        return "\n".join(f"{r.step.number}. {r.step.operator}: {r.query} -> {r.result}"
                         for r in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [r.to_dict() for r in self.steps],
                "evidence_chunks": list(dict.fromkeys(e.chunk_id for e in self.evidence))}


class LogicFormError(Exception):
    """A step could not run; ``kind`` says why, ``step`` which step (when one)."""

    def __init__(self, kind: str, detail: str, step: int | None = None) -> None:
        where = f"step {step}: " if step is not None else ""
        super().__init__(f"{kind}: {where}{detail}")
        self.kind = kind
        self.detail = detail
        self.step = step


def parse_steps(text: str, max_steps: int = 6) -> tuple[Step, ...]:
    """The numbered ``N. operator: text`` lines of a reply (other lines are ignored).

    :class:`~shared_core.llm.BadOutput` (so the runner asks again) for no steps
    (``unparsable``), steps not numbered 1, 2, 3, ... or more than ``max_steps``
    (``unparsable``), an operator outside :data:`OPERATORS` (``unknown_operator``),
    a reference to a step not before it (``missing_reference``), a filter without
    ``|`` or a count of anything but one earlier step (``unparsable``).

    >>> [str(s) for s in parse_steps("1. retrieve: How tall is A?\\n"
    ...                              "2. retrieve: How tall is B?\\n"
    ...                              "3. compute: {step1} - {step2}")]
    ['1. retrieve: How tall is A?', '2. retrieve: How tall is B?', '3. compute: {step1} - {step2}']
    """
    steps: list[Step] = []
    for line in text.splitlines():
        match = _STEP_LINE.match(line)
        if not match:
            continue
        number, word, body = int(match.group(1)), match.group(2).casefold(), match.group(3)
        body = body.strip().strip("*`").strip()
        if word not in OPERATORS:
            raise BadOutput("unknown_operator", f"step {number} uses {word!r}; the operators "
                            f"are {', '.join(OPERATORS)}")
        if number != len(steps) + 1:
            raise BadOutput("unparsable", f"steps must be numbered 1, 2, 3, ...; got {number} "
                            f"after {len(steps)}")
        if not body:
            raise BadOutput("unparsable", f"step {number} is empty")
        references = tuple(int(n) for n in _REFERENCE.findall(body))
        bad = [n for n in references if not 1 <= n < number]
        if bad:
            raise BadOutput("missing_reference", f"step {number} uses {{step{bad[0]}}}, which "
                            "is not an earlier step")
        operator = cast(Operator, word)
        if operator == "filter" and "|" not in body:
            raise BadOutput("unparsable", f"step {number}: a filter is '{{stepN}} | condition'")
        if operator in ("filter", "count") and len(set(references)) != 1:
            raise BadOutput("unparsable", f"step {number}: {operator} works on exactly one "
                            "earlier step, written {stepN}")
        if operator in ("compare", "compute") and not references:
            raise BadOutput("unparsable", f"step {number}: {operator} needs earlier answers "
                            "({stepN}) to work on")
        steps.append(Step(number, operator, body, references))
    if not steps:
        raise BadOutput("unparsable", f"no 'N. operator: text' steps in {text[:80]!r}")
    if len(steps) > max_steps:
        raise BadOutput("unparsable", f"{len(steps)} steps, more than {max_steps}")
    return tuple(steps)


def decompose_messages(query: str, max_steps: int) -> list[Message]:
    return [Message("system", decompose_system(max_steps)), Message("user", f"Question: {query}")]


def items_of(answer: str) -> tuple[str, ...]:
    """A list answer's items: split at commas, semicolons, new lines and "and".

    >>> items_of("Paris, Lyon and Nice")
    ('Paris', 'Lyon', 'Nice')
    """
    return tuple(i.strip(" .") for i in _ITEM_SPLIT.split(answer) if i.strip(" ."))


class LogicForm:
    """Decomposition by the LLM, then the steps, run in order (Algorithm 1)."""

    def __init__(self, runner: LLMRunner, retriever: DualLevelRetriever, *,
                 step_budget: int = 300, max_steps: int = 6,
                 decompose_max_tokens: int | None = 256,
                 step_max_tokens: int | None = 64) -> None:
        check_count("step_budget", step_budget)
        check_count("max_steps", max_steps)
        self.runner = runner
        self.retriever = retriever
        self.step_budget = step_budget
        self.max_steps = max_steps
        self.decompose_max_tokens = decompose_max_tokens
        self.step_max_tokens = step_max_tokens

    async def decompose(self, query: str) -> tuple[Step, ...]:
        """The query's steps (one LLM call, asked again on an unusable reply);
        :class:`~shared_core.llm.RequestFailed` when no reply was usable."""

        def parse(completion: Completion) -> tuple[Step, ...]:
            return parse_steps(reply_text(completion), self.max_steps)

        return await self.runner.acall(DECOMPOSE_STAGE, decompose_messages(query, self.max_steps),
                                       parse, max_tokens=self.decompose_max_tokens)

    async def execute(self, steps: tuple[Step, ...]) -> LogicFormResult:
        """Every step in order; :class:`LogicFormError` at the first that cannot run."""
        done: dict[int, StepResult] = {}
        for step in steps:
            done[step.number] = await self._run(step, done)
        results = tuple(done.values())
        return LogicFormResult(results, tuple(unique(e for r in results for e in r.evidence)))

    async def _run(self, step: Step, done: Mapping[int, StepResult]) -> StepResult:
        for n in step.references:
            if n not in done:
                raise LogicFormError("missing_reference", f"{{step{n}}} has not run", step.number)
            if done[n].answer is None:
                raise LogicFormError("missing_answer", f"step {n} found no answer for "
                                     f"{done[n].query!r}", step.number)
        if step.operator == "retrieve":
            return await self._retrieve(step, _filled(step.text, done))
        if step.operator == "count":
            source = done[step.references[0]]
            items = items_of(source.answer or "")
            return StepResult(step, _filled(step.text, done), str(len(items)), float(len(items)))
        if step.operator == "filter":
            return await self._filter(step, done)
        return self._evaluate(step, done)

    async def _retrieve(self, step: Step, query: str) -> StepResult:
        evidence = tuple(await asyncio.to_thread(self.retriever.for_key, query, "low",
                                                 budget=self.step_budget, step=step.number))
        if not evidence:
            return StepResult(step, query, None)
        messages = [Message("system", STEP_SYSTEM),
                    Message("user", question_with_context(query, list(evidence)))]
        reply = await self.runner.acall(STEP_STAGE, messages, _short_answer,
                                        max_tokens=self.step_max_tokens)
        return StepResult(step, query, reply, first_number(reply) if reply else None, evidence)

    async def _filter(self, step: Step, done: Mapping[int, StepResult]) -> StepResult:
        source = done[step.references[0]]
        items = items_of(source.answer or "")
        condition = step.text.split("|", 1)[1].strip()
        query = f"{', '.join(items)} | {condition}"
        numeric = _NUMERIC_CONDITION.match(condition)
        if numeric:
            op, bound = ("==" if numeric.group(1) == "=" else numeric.group(1),
                         float(numeric.group(2).replace(",", "")))
            kept = []
            for item in items:
                number = first_number(item)
                if number is not None and evaluate(f"x {op} bound", {"x": number,
                                                                     "bound": bound}):
                    kept.append(item)
            evidence: tuple[Evidence, ...] = ()
        else:
            evidence = tuple(await asyncio.to_thread(
                self.retriever.for_key, f"{condition} {' '.join(items)}", "low",
                budget=self.step_budget, step=step.number))
            messages = [Message("system", FILTER_SYSTEM), Message("user", question_with_context(
                f"Items: {', '.join(items)}\nCondition: {condition}", list(evidence)))]
            reply = await self.runner.acall(STEP_STAGE, messages, _short_answer,
                                            max_tokens=self.step_max_tokens)
            named = {i.casefold() for i in items_of(reply or "")}
            kept = [i for i in items if i.casefold() in named]  # only items of the list
        return StepResult(step, query, ", ".join(kept) or None, tuple(kept), evidence)

    def _evaluate(self, step: Step, done: Mapping[int, StepResult]) -> StepResult:
        names: dict[str, float] = {}
        for n in step.references:
            value = done[n].value
            number = (float(value) if isinstance(value, (int, float))
                      else first_number(done[n].answer or ""))
            if number is None:
                if step.operator == "compare" and len(step.references) == 2:
                    return _compare_text(step, done)
                raise LogicFormError("no_number", f"step {n}'s answer {done[n].result!r} has "
                                     "no number", step.number)
            names[f"step{n}"] = float(number)
        expression = _REFERENCE.sub(lambda m: f"step{int(m.group(1))}", step.text)
        try:
            value = evaluate(expression, names)
        except ExpressionError as exc:
            raise LogicFormError("bad_expression", str(exc), step.number) from exc
        if step.operator == "compare" and not isinstance(value, bool):
            raise LogicFormError("bad_expression", f"{step.text!r} is not a comparison",
                                 step.number)
        return StepResult(step, _filled(step.text, done), format_value(value), value)


def _compare_text(step: Step, done: Mapping[int, StepResult]) -> StepResult:
    """``{stepA} == {stepB}`` (or ``!=``) over answers that are not numbers: same text?"""
    match = re.fullmatch(r"\s*\{[^}]*\}\s*(==|!=)\s*\{[^}]*\}\s*", step.text)
    if not match:
        raise LogicFormError("no_number", "only == and != compare answers that are not "
                             "numbers", step.number)
    a, b = (" ".join((done[n].answer or "").casefold().split()) for n in step.references)
    same = a == b
    value = same if match.group(1) == "==" else not same
    return StepResult(step, _filled(step.text, done), format_value(value), value)


def _filled(text: str, done: Mapping[int, StepResult]) -> str:
    """``text`` with every ``{stepN}`` replaced by step N's answer."""
    return _REFERENCE.sub(lambda m: done[int(m.group(1))].result, text)


def _short_answer(completion: Completion) -> str | None:
    """A step's answer, or None for UNKNOWN/NONE (the evidence did not say)."""
    text = reply_text(completion).strip().strip("*`\"' ").splitlines()[0].strip()
    if not text:
        raise BadOutput("empty", "a blank first line")
    return None if text.rstrip(".").upper() in (UNKNOWN, "NONE") else text
