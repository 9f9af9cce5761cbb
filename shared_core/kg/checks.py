"""Checking JSON data before anything is built from it: one place, one style of message.

Saved graphs and store lines are data from disk; every field is checked and a
bad one is named by its path (``entities[3].mentions[0].name``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def check_text(value: object, what: str, *, empty: bool = False) -> str:
    """``value`` if it is a string (a non-blank one unless ``empty``), else ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise ValueError(f"{what} must not be empty")
    return value


def fields(data: object, where: str, names: tuple[str, ...]) -> Mapping[str, Any]:
    """``data`` if it is an object with exactly these fields; else a ValueError naming them."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be an object, got {type(data).__name__}")
    missing = [n for n in names if n not in data]
    extra = sorted(str(k) for k in data if k not in names)
    if missing or extra:
        raise ValueError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unexpected {', '.join(extra)}"] if extra else [])))
    return data


def as_list(data: object, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise ValueError(f"{where} must be a list, got {type(data).__name__}")
    return data


def build(kind: Callable[..., T], where: str, *args: Any) -> T:
    """``kind(*args)``, its complaint (TypeError or ValueError) as a ValueError saying where."""
    try:
        return kind(*args)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
