"""README command 1's app runs offline in CI (with the hashing embedder: no model to load)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_builds_selects_and_answers_offline(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--embedder", "hashing"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # the three selections it shows save what kappa (a share of tokens) says, within a chunk
    savings = [float(s) for s in re.findall(r"construction-cost reduction: ([\d.]+)%", out)]
    assert len(savings) == 3
    for saving, kept_share in zip(savings, (0.8, 0.5, 0.2), strict=True):
        assert 100 * (1 - kept_share) - 0.5 <= saving <= 100 * (1 - kept_share) + 2.0
    answered = re.search(r"answer in context for (\d+)/12 questions", out)
    assert answered is not None and int(answered.group(1)) >= 1
