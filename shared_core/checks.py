"""Argument checks shared by the core's constructors, so every knob fails the same clear way."""

from __future__ import annotations


def check_count(name: str, value: object, *, optional: bool = False) -> None:
    """``value`` must be an int >= 1 (or None when ``optional``); bools are not ints here.

    >>> check_count("budget", 0)
    Traceback (most recent call last):
    ...
    ValueError: budget must be an int >= 1, got 0
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        either = " or None" if optional else ""
        raise ValueError(f"{name} must be an int >= 1{either}, got {value!r}")
