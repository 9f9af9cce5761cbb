"""Prices, the estimate before a stage runs and the check after: every figure by hand.

List prices used below (USD per 1M tokens, input / output / cached input):
gpt-4o-mini 0.15 / 0.60 / 0.075, gpt-4o 2.50 / 10.00 / 1.25, gpt-4.1-nano 0.10 / 0.40 / 0.025.
"""

from __future__ import annotations

import pytest

from shared_core.llm import (
    DEFAULT_OUTPUT_RATIO,
    PRICES,
    EstimateCheck,
    ModelPrice,
    StageUsage,
    estimate_cost,
    price_for,
)

MINI = ModelPrice(0.15, 0.60, 0.075)
FOUR_O = ModelPrice(2.50, 10.00, 1.25)


def test_the_list_prices_used_below() -> None:
    assert PRICES["gpt-4o-mini"] == MINI and PRICES["gpt-4o"] == FOUR_O
    assert PRICES["gpt-4.1-nano"] == ModelPrice(0.10, 0.40, 0.025)
    assert DEFAULT_OUTPUT_RATIO == 0.25


@pytest.mark.parametrize("model, price", [
    ("gpt-4o-mini", MINI),  # exact
    ("gpt-4o", FOUR_O),
    ("gpt-4o-mini-2024-07-18", MINI),  # a dated snapshot: the longest family, not gpt-4o
    ("gpt-4o-2024-08-06", FOUR_O),
    ("gpt-4.1-nano-2025-04-14", ModelPrice(0.10, 0.40, 0.025)),
    ("gpt-4o2", None),  # a family needs the dash: "gpt-4o2" is not a gpt-4o
    ("GPT-4o-mini", None),  # names are case-sensitive, as the API's are
    ("llama-3.1-8b", None),
    ("", None),
])
def test_price_for_the_list(model: str, price: ModelPrice | None) -> None:
    assert price_for(model) == price


def test_the_users_table_comes_first() -> None:
    local = ModelPrice(0, 0)
    mine = {"llama-3.1": local, "gpt-4o-mini": ModelPrice(0.1, 0.5)}
    assert price_for("llama-3.1", mine) == local
    assert price_for("llama-3.1-8b-instruct", mine) == local  # the user's family
    assert price_for("gpt-4o-mini", mine) == ModelPrice(0.1, 0.5)  # overrides the list
    assert price_for("gpt-4o-mini-2024-07-18", mine) == ModelPrice(0.1, 0.5)
    assert price_for("gpt-4o", mine) == FOUR_O  # not in the user's table: the list
    assert price_for("mistral-7b", mine) is None
    assert price_for("gpt-4o", {}) == FOUR_O


def test_a_users_family_price_does_not_shadow_an_exact_list_price() -> None:
    mine = {"gpt-4o": ModelPrice(2.0, 8.0)}  # a negotiated gpt-4o price
    assert price_for("gpt-4o", mine) == ModelPrice(2.0, 8.0)
    assert price_for("gpt-4o-mini", mine) == MINI


def test_model_price_usd_by_hand() -> None:
    # 1M in of which 400k cached, 200k out: 600k * 0.15 + 400k * 0.075 + 200k * 0.60
    # = 0.09 + 0.03 + 0.12 = 0.24 dollars
    assert MINI.usd(1_000_000, 200_000, 400_000) == pytest.approx(0.24)
    assert MINI.usd(1_000_000, 200_000) == pytest.approx(0.15 + 0.12)
    # no cached price: cached input costs what input costs; 500k * 2 + 100k * 8 = 1.8
    assert ModelPrice(2, 8).usd(500_000, 100_000, 100_000) == pytest.approx(1.8)
    assert ModelPrice(0, 0).usd(10**9, 10**9) == 0.0
    assert MINI.usd(0, 0) == 0.0


@pytest.mark.parametrize("args", [(-1, 1), (1, -0.5), (True, 1), (1, "2"), (1, 1, -1),
                                  (1, 1, False)])
def test_model_price_is_checked(args: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match="must be a number >= 0"):
        ModelPrice(*args)  # type: ignore[arg-type]


def test_estimate_cost_by_hand() -> None:
    est = estimate_cost("extract", "gpt-4o-mini", calls=100, input_tokens=120_000)
    # output 120,000 * 0.25 = 30,000; dollars 120k * 0.15 + 30k * 0.60 = 0.018 + 0.018
    assert (est.stage, est.model, est.calls, est.input_tokens, est.output_tokens,
            est.output_ratio, est.price) == ("extract", "gpt-4o-mini", 100, 120_000, 30_000,
                                             0.25, MINI)
    assert est.usd == pytest.approx(0.036)
    assert est.summary() == ("extract with gpt-4o-mini: 100 calls, ~120,000 input + ~30,000 "
                             "output tokens (output ratio 0.25, estimated); ~$0.04")


def test_estimate_with_a_ratio_and_a_table_of_ones_own() -> None:
    est = estimate_cost("glean", "local-llm", calls=3, input_tokens=1_001, output_ratio=1,
                        prices={"local-llm": ModelPrice(0, 0)})
    assert (est.output_tokens, est.output_ratio, est.usd) == (1_001, 1.0, 0.0)
    assert isinstance(est.output_ratio, float)
    assert est.summary().endswith("(output ratio 1, estimated); ~$0.00")


def test_an_unpriced_model_gets_tokens_and_no_dollars() -> None:
    est = estimate_cost("extract", "smollm2", calls=2, input_tokens=1_000, output_ratio=0.5)
    assert (est.output_tokens, est.price, est.usd) == (500, None, None)
    assert est.summary() == ("extract with smollm2: 2 calls, ~1,000 input + ~500 output tokens "
                             "(output ratio 0.5, estimated); no price known for 'smollm2' "
                             "(pass prices=)")


@pytest.mark.parametrize("ratio", [-0.1, True, "0.25", None])
def test_a_bad_output_ratio_is_refused(ratio: object) -> None:
    with pytest.raises(ValueError, match="output_ratio must be a number >= 0"):
        estimate_cost("extract", "gpt-4o-mini", calls=1, input_tokens=10,
                      output_ratio=ratio)  # type: ignore[arg-type]


def test_the_check_after_the_run_by_hand() -> None:
    est = estimate_cost("extract", "gpt-4o-mini", calls=100, input_tokens=120_000)
    spent = StageUsage(calls=100, input_tokens=150_000, output_tokens=15_000,
                       cached_tokens=50_000)
    check = EstimateCheck(est, spent)
    assert check.input_ratio == pytest.approx(1.25)  # 150k / 120k
    assert check.output_ratio == pytest.approx(0.5)  # 15k / 30k
    assert check.actual_output_ratio == pytest.approx(0.1)  # 15k / 150k
    # 100k * 0.15 + 50k * 0.075 + 15k * 0.60 = 0.015 + 0.00375 + 0.009
    assert check.actual_usd == pytest.approx(0.02775)
    assert check.summary() == ("extract: spent 150,000 input / 15,000 output tokens in 100 "
                               "calls; 125% / 50% of the estimate; measured output ratio "
                               "0.100; ~$0.03")


def test_the_check_with_nothing_to_divide_by() -> None:
    est = estimate_cost("extract", "smollm2", calls=0, input_tokens=0)
    check = EstimateCheck(est, StageUsage())
    assert (check.input_ratio, check.output_ratio, check.actual_output_ratio,
            check.actual_usd) == (None, None, None, None)
    assert check.summary() == ("extract: spent 0 input / 0 output tokens in 0 calls; "
                               "n/a / n/a of the estimate")
