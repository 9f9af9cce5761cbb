"""The trace of one answer: every stage that ran, what it returned, what it cost, how long.

Tokens come from the query's own ledger (:class:`QueryLedger`), which also
books every call in the pipeline's shared ledger as it happens, so a stage's
spend is exact even while other queries run on the same runner.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..llm import Completion, StageUsage, TokenLedger

Status = Literal["ok", "failed", "rejected", "fallback", "stopped"]
Route = Literal["logic_form", "dual_level"]


class QueryLedger(TokenLedger):
    """One query's ledger that also books everything in ``shared`` (the runner's)."""

    def __init__(self, shared: TokenLedger) -> None:
        super().__init__()
        self.shared = shared

    def record(self, stage: str, completion: Completion) -> None:
        super().record(stage, completion)
        self.shared.record(stage, completion)

    def record_retry(self, stage: str) -> None:
        super().record_retry(stage)
        self.shared.record_retry(stage)

    def record_failure(self, stage: str) -> None:
        super().record_failure(stage)
        self.shared.record_failure(stage)

    def record_bad_output(self, stage: str, kind: str) -> None:
        super().record_bad_output(stage, kind)
        self.shared.record_bad_output(stage, kind)


def spent_since(ledger: TokenLedger, before: dict[str, Any]) -> StageUsage:
    """What ``ledger`` booked since its ``to_dict()`` was ``before``, all stages summed."""
    now = TokenLedger.from_dict(ledger.to_dict()).total()
    earlier = TokenLedger.from_dict(before).total()
    out = StageUsage()
    for name in ("calls", "input_tokens", "output_tokens", "cached_tokens",
                 "calls_counted_locally", "retries", "failures"):
        setattr(out, name, getattr(now, name) - getattr(earlier, name))
    out.bad_outputs = {k: n - earlier.bad_outputs.get(k, 0)
                       for k, n in now.bad_outputs.items()
                       if n - earlier.bad_outputs.get(k, 0)}
    return out


@dataclass(frozen=True)
class StageRecord:
    """One stage: its name, how it ended, what it returned, its LLM spend and seconds.

    ``status``: ``ok``; ``failed`` (``error``/``error_kind`` say why; the
    pipeline fell back); ``rejected`` (the verifier said no); ``fallback`` (it
    ran its no-LLM way after its LLM call failed); ``stopped`` (the consumer
    stopped reading the answer).
    """

    name: str
    status: Status
    output: Any
    tokens: StageUsage
    seconds: float
    error: str | None = None
    error_kind: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "output": self.output,
                "tokens": asdict(self.tokens), "seconds": round(self.seconds, 4),
                "error": self.error, "error_kind": self.error_kind}


@dataclass
class AnswerTrace:
    """Every stage of one answer, in the order they ran, and the route the answer took.

    ``fallback_reason`` says why dual-level retrieval ran instead of the
    logic form (``None`` when the logic form answered, or was off).
    """

    query: str
    ledger: TokenLedger
    stages: list[StageRecord] = field(default_factory=list)
    route: Route | None = None
    fallback_reason: str | None = None

    def stage(self, name: str) -> StageRecord | None:
        """The last record of stage ``name``, or None if it did not run."""
        return next((s for s in reversed(self.stages) if s.name == name), None)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    @property
    def complete(self) -> bool:
        """Whether the answer stage has finished (its record is there)."""
        return self.stage("answer") is not None

    def tokens(self) -> StageUsage:
        """Everything the query spent, all stages."""
        return self.ledger.total()

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "route": self.route,
                "fallback_reason": self.fallback_reason,
                "stages": [s.to_dict() for s in self.stages],
                "tokens": asdict(self.tokens())}

    def table(self) -> str:
        """One line a stage: name, status, LLM calls, tokens in/out, seconds, error."""
        rows = [("stage", "status", "calls", "input", "output", "seconds", "note")]
        for s in self.stages:
            rows.append((s.name, s.status, str(s.tokens.calls), str(s.tokens.input_tokens),
                         str(s.tokens.output_tokens), f"{s.seconds:.2f}",
                         (s.error or "")[:60]))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in rows)


class StageClock:
    """Times a stage and measures its spend in the query's ledger."""

    def __init__(self, trace: AnswerTrace, name: str) -> None:
        self.trace = trace
        self.name = name
        self.before = trace.ledger.to_dict()
        self.start = time.perf_counter()

    def done(self, status: Status, output: Any, *, error: BaseException | str | None = None,
             error_kind: str | None = None) -> StageRecord:
        """Record the stage in the trace, and return the record."""
        record = StageRecord(self.name, status, output,
                             spent_since(self.trace.ledger, self.before),
                             time.perf_counter() - self.start,
                             None if error is None else str(error),
                             error_kind if error_kind is not None
                             else getattr(error, "kind", None))
        self.trace.stages.append(record)
        return record
