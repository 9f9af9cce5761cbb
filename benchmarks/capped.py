"""A command run inside a memory cgroup: does it fit a machine of that much memory?

    sudo python -m benchmarks.capped --limit-gib 8 --drop-caches \
        --out benchmarks/results/capped_build_1m.json -- \
        python -m benchmarks.scale --sizes 1000000 --save /tmp/q

A process's heap is not all it needs: the files it maps (a saved index's vectors, a
build's spilled ones) must sit in the page cache while it reads them. A memory
cgroup charges that cache with the process's own memory and evicts it at the limit,
as an 8 GiB machine's kernel would; ``ru_maxrss`` on a large machine cannot show
whether it fits. Reported: the wall time, the cgroup's peak usage (heap and page
cache), its major page faults (reads from disk) and the command's exit status.

Needs root and Linux's memory cgroup, version 1 (``/sys/fs/cgroup/memory``) or 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryCgroup:
    """One cgroup's files, under cgroup version 1 or 2 (their names differ)."""

    path: Path
    version: int

    @classmethod
    def create(cls, limit_bytes: int, root: Path = CGROUP_ROOT) -> MemoryCgroup:
        name = f"conceptgraph-capped-{uuid.uuid4().hex[:8]}"
        if (root / "memory" / "memory.limit_in_bytes").exists():
            group = cls(root / "memory" / name, 1)
        elif "memory" in _read(root / "cgroup.controllers").split():
            group = cls(root / name, 2)
        else:
            raise RuntimeError(f"no memory cgroup under {root}: this needs Linux's memory "
                               "controller (cgroup v1 or v2)")
        try:
            group.path.mkdir()
        except PermissionError as exc:
            raise RuntimeError(f"cannot create {group.path}: run as root") from exc
        group._write("memory.limit_in_bytes" if group.version == 1 else "memory.max",
                     limit_bytes)
        if group.version == 2 and (group.path / "memory.swap.max").exists():
            group._write("memory.swap.max", 0)  # v1 charges no swap to the limit either
        return group

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value), encoding="ascii")

    def admit(self) -> None:
        """Move the calling process into the cgroup (a child, before it runs the command)."""
        self._write("cgroup.procs", os.getpid())

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup held, page cache included (None where v2's kernel
        keeps no peak: before Linux 5.19)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        text = _read(self.path / name)
        return int(text) if text else None

    def major_faults(self) -> int:
        return memory_stat(_read(self.path / "memory.stat"), self.version)["major_faults"]

    def remove(self) -> None:
        """Remove the cgroup; it stays, with a warning, while a process the command
        left behind is still in it."""
        try:
            self.path.rmdir()
        except OSError as exc:
            print(f"warning: {self.path} was not removed ({exc}): a process the command "
                  "started is still in it", file=sys.stderr)


def memory_stat(text: str, version: int) -> dict[str, int]:
    """Major page faults, heap and page cache from a cgroup's ``memory.stat``."""
    fields = dict(line.split() for line in text.splitlines() if line.strip())
    names = (("total_pgmajfault", "total_rss", "total_cache") if version == 1
             else ("pgmajfault", "anon", "file"))
    major, anon, cache = (int(fields.get(name, 0)) for name in names)
    return {"major_faults": major, "anon_bytes": anon, "cache_bytes": cache}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return ""


def run_capped(command: list[str], limit_bytes: int, drop_caches: bool) -> dict[str, Any]:
    """``command`` run in a new memory cgroup of ``limit_bytes``, and what it took."""
    if not command:
        raise ValueError("give the command to run after --")
    group = MemoryCgroup.create(limit_bytes)
    try:
        if drop_caches:  # so the command reads its files from disk, as a fresh machine would
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3", encoding="ascii")
        start = time.perf_counter()
        child = subprocess.run(command, preexec_fn=group.admit, check=False)
        wall = time.perf_counter() - start
        return {"command": " ".join(command), "limit_bytes": limit_bytes,
                "cgroup_version": group.version, "exit": child.returncode,
                "wall_s": round(wall, 1), "peak_bytes": group.peak_bytes(),
                "major_faults": group.major_faults(), "drop_caches": drop_caches}
    finally:
        group.remove()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, required=True)
    parser.add_argument("--drop-caches", action="store_true",
                        help="empty the page cache first (root)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the command, e.g. python -m benchmarks.scale ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    report = run_capped(command, int(args.limit_gib * 2**30), args.drop_caches)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.exit(report["exit"])


if __name__ == "__main__":
    main()
