"""What an LLM stage will cost before it runs, and how far off that was after.

Prices are USD per million tokens. :data:`PRICES` holds OpenAI's list prices as
published in 2025; prices change, so pass your own table (``prices=``) for
anything that matters. A model with no price gets token estimates and no dollar
figure, never a made-up one. A local server costs what your machine costs:
give it ``ModelPrice(0, 0)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .ledger import StageUsage


@dataclass(frozen=True)
class ModelPrice:
    """USD per 1M input, output and cached-input tokens (cached defaults to input's)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok"):
            value = getattr(self, name)
            if value is None and name == "cached_input_per_mtok":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    def usd(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        cached_rate = (self.input_per_mtok if self.cached_input_per_mtok is None
                       else self.cached_input_per_mtok)
        return ((input_tokens - cached_tokens) * self.input_per_mtok
                + cached_tokens * cached_rate + output_tokens * self.output_per_mtok) / 1e6


PRICES: dict[str, ModelPrice] = {
    "gpt-4o-mini": ModelPrice(0.15, 0.60, 0.075),
    "gpt-4o": ModelPrice(2.50, 10.00, 1.25),
    "gpt-4.1": ModelPrice(2.00, 8.00, 0.50),
    "gpt-4.1-mini": ModelPrice(0.40, 1.60, 0.10),
    "gpt-4.1-nano": ModelPrice(0.10, 0.40, 0.025),
}

# Output tokens per input token of a KG-extraction call, when the user gives none: a
# guess (GraphRAG-style tuples run at a few hundred tokens per 1,200-token chunk), shown
# as such; the check after a run reports the real ratio to use next time.
DEFAULT_OUTPUT_RATIO = 0.25


def price_for(model: str, prices: Mapping[str, ModelPrice] | None = None) -> ModelPrice | None:
    """The model's price: an exact entry, else the longest entry its name starts with.

    The prefix rule prices dated snapshots (``gpt-4o-mini-2024-07-18``) as their
    family. The user's entries override :data:`PRICES` name by name, and both are
    searched as one table, so a user's ``gpt-4o`` never prices ``gpt-4o-mini``.
    """
    table = {**PRICES, **(prices or {})}
    if model in table:
        return table[model]
    family = [name for name in table if model.startswith(name + "-")]
    return table[max(family, key=len)] if family else None


@dataclass(frozen=True)
class CostEstimate:
    """Tokens (and dollars, when the model has a price) a stage will spend."""

    stage: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    output_ratio: float
    price: ModelPrice | None

    @property
    def usd(self) -> float | None:
        return None if self.price is None else self.price.usd(self.input_tokens,
                                                              self.output_tokens)

    def summary(self) -> str:
        cost = (f"~${self.usd:,.2f}" if self.usd is not None
                else f"no price known for {self.model!r} (pass prices=)")
        return (f"{self.stage} with {self.model}: {self.calls:,} calls, ~{self.input_tokens:,} "
                f"input + ~{self.output_tokens:,} output tokens (output ratio "
                f"{self.output_ratio:g}, estimated); {cost}")


def estimate_cost(stage: str, model: str, *, calls: int, input_tokens: int,
                  output_ratio: float = DEFAULT_OUTPUT_RATIO,
                  prices: Mapping[str, ModelPrice] | None = None) -> CostEstimate:
    if isinstance(output_ratio, bool) or not isinstance(output_ratio, (int, float)) \
            or output_ratio < 0:
        raise ValueError(f"output_ratio must be a number >= 0, got {output_ratio!r}")
    return CostEstimate(stage, model, calls, input_tokens, round(input_tokens * output_ratio),
                        float(output_ratio), price_for(model, prices))


@dataclass(frozen=True)
class EstimateCheck:
    """An estimate next to what the ledger recorded: the ratios say how good it was."""

    estimate: CostEstimate
    actual: StageUsage

    @property
    def input_ratio(self) -> float | None:
        """Actual input tokens over estimated (1.0 is a perfect estimate)."""
        est = self.estimate.input_tokens
        return None if est == 0 else self.actual.input_tokens / est

    @property
    def output_ratio(self) -> float | None:
        est = self.estimate.output_tokens
        return None if est == 0 else self.actual.output_tokens / est

    @property
    def actual_output_ratio(self) -> float | None:
        """Output per input token as spent: the ``output_ratio`` to estimate with next time."""
        inp = self.actual.input_tokens
        return None if inp == 0 else self.actual.output_tokens / inp

    @property
    def actual_usd(self) -> float | None:
        price = self.estimate.price
        return None if price is None else price.usd(self.actual.input_tokens,
                                                    self.actual.output_tokens,
                                                    self.actual.cached_tokens)

    def summary(self) -> str:
        def pct(r: float | None) -> str:
            return "n/a" if r is None else f"{r:.0%}"

        line = (f"{self.estimate.stage}: spent {self.actual.input_tokens:,} input / "
                f"{self.actual.output_tokens:,} output tokens in {self.actual.calls:,} calls; "
                f"{pct(self.input_ratio)} / {pct(self.output_ratio)} of the estimate")
        if self.actual_output_ratio is not None:
            line += f"; measured output ratio {self.actual_output_ratio:.3f}"
        if self.actual_usd is not None:
            line += f"; ~${self.actual_usd:,.2f}"
        return line
