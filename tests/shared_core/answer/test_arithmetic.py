"""The safe evaluator: arithmetic and comparisons over earlier answers, nothing else."""

from __future__ import annotations

import pytest

from shared_core.answer import ExpressionError, evaluate, first_number, format_value


@pytest.mark.parametrize("expression, value", [
    ("step1 - step3", 0.65),            # 1.85 - 1.2, float noise rounded away
    ("(step1 + step3) * 2", 6.1),
    ("step1 / step3", 1.541666666667),  # 1.85 / 1.2 = 1.5416666..., 12 places
    ("step1 > step3", True),
    ("1 < step3 < step1", True),
    ("step3 >= step1 or not step1", False),
    ("abs(step3 - step1)", 0.65),
    ("max(step1, step3, 2)", 2),
    ("round(step1)", 2),
    ("2 ** 10 % 1000", 24),
    ("-step1 // 1", -2.0),
])
def test_expressions_over_named_answers(expression: str, value: float | bool) -> None:
    assert evaluate(expression, {"step1": 1.85, "step3": 1.2}) == value


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('x')", "Call is not allowed"),
    ("step1.real", "Attribute is not allowed"),
    ("[1, 2][0]", "Subscript is not allowed"),
    ("'a' * 3", "only numbers are allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("unknown + 1", "unknown name 'unknown' \\(known: step1\\)"),
    ("step1 / 0", "division by zero"),
    ("10 ** 100", "too large"),
    ("1 +", "not an expression"),
    ("", "empty"),
    ("1" + "+1" * 200, "longer than 300"),
    ("+".join(["1"] * 60), "more than 80 parts"),
    ("True + 1", "only numbers"),
    ("abs()", "Call is not allowed"),
])
def test_anything_else_is_refused_with_a_reason(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        evaluate(expression, {"step1": 2.0})


@pytest.mark.parametrize("text, number", [
    ("330 metres", 330.0), ("about 1,234.5 m", 1234.5), ("-3 degrees", -3.0),
    ("it is 2.5e3", 2500.0), ("3, 4 and 5", 3.0), ("none here", None), (".5 litres", 0.5),
])
def test_first_number(text: str, number: float | None) -> None:
    assert first_number(text) == number


def test_values_are_written_as_an_answer_reads() -> None:
    assert [format_value(v) for v in (True, False, 237.0, -4, 0.65, 1 / 3)] == [
        "yes", "no", "237", "-4", "0.65", "0.333333333333"]
