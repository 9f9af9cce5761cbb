"""Loops compiled by numba where it is installed (the ``fast`` extra), made once a process.

A module that has a loop numpy cannot express without temporaries as long as its input
(a query's posting sums, an update's pass over every strong pair) keeps a
:class:`CompiledLoops` of them and a numpy way that gives the same results. Which one
runs is the process's: numba importable, and ``CONCEPTGRAPH_COMPILED`` not ``"0"``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

# set to "0" to run the numpy code even where numba is installed
COMPILED_ENV = "CONCEPTGRAPH_COMPILED"

NUMBA_MISSING = "numba is not installed: pip install 'conceptgraph[fast]'"


class CompiledLoops:
    """The loops ``make(numba)`` returns by name, compiled on first use (numba caches them
    on disk, so a later process loads them: 0.2-0.6 s each instead of a second or more)."""

    def __init__(self, make: Callable[[Any], dict[str, Any]]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._loops: dict[str, Any] = {}
        self._missing: str | None = None

    def active(self) -> dict[str, Any]:
        """The loops by name, or none where they are turned off or numba is missing."""
        return {} if os.environ.get(COMPILED_ENV, "1") == "0" else self.made()

    def made(self) -> dict[str, Any]:
        """The loops by name whether turned off or not; none where numba is missing."""
        if self._loops or self._missing:
            return self._loops
        with self._lock:
            if self._loops or self._missing:
                return self._loops
            try:
                import numba
            except ImportError:
                self._missing = NUMBA_MISSING
                return self._loops
            self._loops.update(self._make(numba))
            return self._loops

    def missing(self) -> str | None:
        """Why the loops cannot run (numba not installed), or None where they can."""
        self.made()
        return self._missing


def jit(numba: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """numba's ``njit`` as every loop here is compiled: without the GIL, cached on disk."""
    decorator: Callable[[Callable[..., Any]], Callable[..., Any]] = numba.njit(
        nogil=True, cache=True)
    return decorator


def read_only(array: Any) -> Any:
    """A read-only view of ``array``: a loop sees one kind of array whether what it reads
    is mapped from a save (read-only) or made in this process, and compiles once."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view
