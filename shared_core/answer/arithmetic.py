"""Arithmetic and comparisons for logic-form steps, computed here and never by the LLM.

A small evaluator over Python's own parser (``ast.parse``, which only parses):
numbers, the names of earlier answers, ``+ - * / // % **``, comparisons
(``< <= > >= == !=``, chained), ``and``/``or``/``not``, and ``abs``, ``round``,
``min``, ``max``. Anything else (attributes, subscripts, other calls, strings)
is refused, so nothing the LLM writes can run code. Sizes are bounded: the
expression's length, its node count, and exponents.

>>> evaluate("step1 - step3", {"step1": 1.85, "step3": 1.2})
0.65
>>> evaluate("step1 > 2 * step2", {"step1": 7, "step2": 3})
True
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

MAX_CHARS = 300
MAX_NODES = 80
MAX_EXPONENT = 64
# rounding that hides float noise (1.85 - 1.2 = 0.6500000000000001) without losing digits
DIGITS = 12

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"abs": abs, "round": round, "min": min, "max": max}
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
                     r"|[-+]?\.\d+")


class ExpressionError(ValueError):
    """An expression this evaluator will not or cannot compute; the message says why."""


def evaluate(expression: str, names: Mapping[str, float]) -> float | bool:
    """The value of ``expression`` with ``names`` bound to numbers; :class:`ExpressionError`
    for anything outside the small language above, or a division by zero."""
    if not isinstance(expression, str) or not expression.strip():
        raise ExpressionError("the expression is empty")
    if len(expression) > MAX_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not an expression: {expression!r} ({exc.msg})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExpressionError(f"the expression has more than {MAX_NODES} parts")
    value = _eval(tree.body, names)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError(f"{expression!r} is not a finite number")
        value = round(value, DIGITS)
    return value


def _eval(node: ast.AST, names: Mapping[str, float]) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExpressionError(f"only numbers are allowed, got {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            known = ", ".join(sorted(names)) or "none"
            raise ExpressionError(f"unknown name {node.id!r} (known: {known})")
        return names[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, names)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return +operand
        if isinstance(node.op, ast.Not):
            return not operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, names), _eval(node.right, names)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > 1e12):
            raise ExpressionError(f"the power {left} ** {right} is too large")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
        except OverflowError:
            raise ExpressionError("the result is too large") from None
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, names)
            if type(op) not in _COMPARE:
                raise ExpressionError(f"the comparison {type(op).__name__} is not allowed")
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, names) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS and not node.keywords and node.args):
        args = [_eval(a, names) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except TypeError as exc:
            raise ExpressionError(f"{node.func.id}(): {exc}") from None
    raise ExpressionError(f"{type(node).__name__} is not allowed in an expression "
                          f"(numbers, earlier answers, arithmetic and comparisons only)")


def first_number(text: str) -> float | None:
    """The first number written in ``text`` ("1,234.5 m" -> 1234.5), or None.

    >>> first_number("about 1,234.5 metres"), first_number("none")
    (1234.5, None)
    """
    match = _NUMBER.search(text)
    return float(match.group(0).replace(",", "")) if match else None


def format_value(value: float | bool) -> str:
    """A result as the answer text: yes/no, a whole number without ".0", else 12 digits.

    >>> format_value(True), format_value(12.0), format_value(0.65)
    ('yes', '12', '0.65')
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{DIGITS}g}"
