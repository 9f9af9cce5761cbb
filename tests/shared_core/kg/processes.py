"""Real child processes that write a KG store, for the lock's fault tests (no mocks).

A child is ``python -c SCRIPT DIRECTORY`` run from the repository root, so it
imports this checkout's ``shared_core`` and test helpers. It tells the parent
where it is by printing one line per step (``Child.expect``); the parent steers
it by writing lines to its stdin.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 20.0  # seconds for any one step: generous, since a step takes well under one

# holds the store's lock until told to let it go (a line on stdin), then says so
HOLD = """
import sys
from shared_core.kg import KGStore
store = KGStore(sys.argv[1], lock=True)
print("locked", flush=True)
sys.stdin.readline()
store.close()
print("released", flush=True)
sys.stdin.readline()
"""


def readable(stream: IO[str], timeout: float) -> bool:
    """Whether ``stream`` has something to read within ``timeout`` seconds. A selector,
    not ``select.select``, which refuses descriptors past 1,023 and so fails once a
    long test session holds that many files."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        return bool(selector.select(timeout))


class Child:
    """A child process running ``script``; ``with Child(...)`` kills it if still alive."""

    def __init__(self, script: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], cwd=ROOT, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, line: str, timeout: float = TIMEOUT) -> None:
        """Wait for the child to print ``line`` (its next line), or fail with its stderr."""
        assert self.proc.stdout is not None
        ready = readable(self.proc.stdout, timeout)
        got = self.proc.stdout.readline().strip() if ready else "(nothing: timed out)"
        if got != line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=TIMEOUT)
            raise AssertionError(f"child said {got!r}, not {line!r}; stderr:\n{err}")

    def say(self, line: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> int:
        """SIGKILL: no finally, no atexit, no close; only the kernel cleans up."""
        self.proc.kill()
        return self.proc.wait(timeout=TIMEOUT)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=TIMEOUT)
