"""Tiny dev sets on disk, in the layout ``benchmarks.data.load_dataset`` reads."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path


def write_dev_set(root: Path, corpus: Sequence[Mapping[str, object]],
                  questions: Sequence[Mapping[str, object]]) -> Path:
    """``root/corpus.jsonl`` and ``root/questions.jsonl``, one record per line."""
    root.mkdir(parents=True)
    for name, rows in (("corpus.jsonl", corpus), ("questions.jsonl", questions)):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root
