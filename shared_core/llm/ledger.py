"""A token ledger per stage: what every LLM call cost, and what went wrong, counted.

Stages are free-form names ("extract", "glean", "terag_ner", "query_ner", ...).
Token counts are the server's where it reported usage, tiktoken's otherwise; the
ledger keeps how many calls were counted each way, so a total is never passed
off as the server's when it is not. It is thread-safe (the runner records from
worker threads) and round-trips through JSON for resumable runs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .messages import Completion

COUNT_FIELDS = ("calls", "input_tokens", "output_tokens", "cached_tokens",
                "calls_counted_locally", "retries", "failures")


def _check_count(stage: object, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"ledger stage {stage!r}: {name} must be an int >= 0, got {value!r}")


@dataclass
class StageUsage:
    """Totals for one stage. ``bad_outputs`` counts unusable replies by kind."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    calls_counted_locally: int = 0
    retries: int = 0
    failures: int = 0
    bad_outputs: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: StageUsage) -> None:
        for name in COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for kind, n in other.bad_outputs.items():
            self.bad_outputs[kind] = self.bad_outputs.get(kind, 0) + n


class TokenLedger:
    """Per-stage token and error counts; ``ledger["extract"].input_tokens`` and so on."""

    def __init__(self, stages: Mapping[str, StageUsage] | None = None) -> None:
        self._lock = threading.Lock()
        self._stages: dict[str, StageUsage] = dict(stages or {})

    def __getitem__(self, stage: str) -> StageUsage:
        with self._lock:
            return self._stages.setdefault(stage, StageUsage())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._stages))

    def __contains__(self, stage: object) -> bool:
        return stage in self._stages

    def record(self, stage: str, completion: Completion) -> None:
        with self._lock:
            usage = self._stages.setdefault(stage, StageUsage())
            usage.calls += 1
            usage.input_tokens += completion.input_tokens
            usage.output_tokens += completion.output_tokens
            usage.cached_tokens += completion.cached_tokens
            usage.calls_counted_locally += completion.usage_from == "tiktoken"

    def record_retry(self, stage: str) -> None:
        with self._lock:
            self._stages.setdefault(stage, StageUsage()).retries += 1

    def record_failure(self, stage: str) -> None:
        with self._lock:
            self._stages.setdefault(stage, StageUsage()).failures += 1

    def record_bad_output(self, stage: str, kind: str) -> None:
        with self._lock:
            bad = self._stages.setdefault(stage, StageUsage()).bad_outputs
            bad[kind] = bad.get(kind, 0) + 1

    def total(self) -> StageUsage:
        out = StageUsage()
        with self._lock:
            for usage in self._stages.values():
                out.add(usage)
        return out

    def merged(self, other: TokenLedger) -> TokenLedger:
        """A new ledger holding both (a resumed run's earlier spend plus this run's)."""
        out = TokenLedger()
        for ledger in (self, other):
            for stage in ledger:
                out[stage].add(ledger[stage])
        return out

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {stage: asdict(u) for stage, u in self._stages.items()}

    @classmethod
    def from_dict(cls, data: object) -> TokenLedger:
        if not isinstance(data, dict):
            raise ValueError(f"a token ledger must be a JSON object, got {type(data).__name__}")
        stages = {}
        for stage, usage in data.items():
            if not isinstance(usage, dict):
                raise ValueError(f"ledger stage {stage!r} must be an object")
            try:
                entry = StageUsage(**usage)
            except TypeError as exc:
                raise ValueError(f"ledger stage {stage!r}: {exc}") from None
            for name in COUNT_FIELDS:
                _check_count(stage, name, getattr(entry, name))
            if not isinstance(entry.bad_outputs, dict):
                raise ValueError(f"ledger stage {stage!r}: bad_outputs must be an object")
            for kind, n in entry.bad_outputs.items():
                _check_count(stage, f"bad_outputs[{kind!r}]", n)
            stages[str(stage)] = entry
        return cls(stages)

    def save(self, path: str | Path) -> None:
        """Atomic write, so a crash leaves the old ledger or the new one."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> TokenLedger:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def table(self) -> str:
        """TERAG's token table (input / output tokens per stage), plus calls and errors."""
        header = ("stage", "calls", "input", "output", "cached", "total", "retries",
                  "failures", "bad outputs")
        rows = []
        for stage in self:
            u = self[stage]
            rows.append((stage, u.calls, u.input_tokens, u.output_tokens, u.cached_tokens,
                         u.total_tokens, u.retries, u.failures, _bad(u)))
        t = self.total()
        rows.append(("total", t.calls, t.input_tokens, t.output_tokens, t.cached_tokens,
                     t.total_tokens, t.retries, t.failures, _bad(t)))
        cells = [[f"{v:,}" if isinstance(v, int) else str(v) for v in row] for row in rows]
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) if i in (0, 8) else c.rjust(w)
                            for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                  for r in cells]
        if t.calls_counted_locally:
            lines.append(f"({t.calls_counted_locally} of {t.calls} calls had no usage from the "
                         "server; their tokens were counted with tiktoken cl100k_base)")
        return "\n".join(line.rstrip() for line in lines)


def _bad(usage: StageUsage) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(usage.bad_outputs.items())) or "-"
