"""The command line as a user runs it: ``batchscope`` in a process of its own, on an experiment file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import ROOT


def bs(*args: str, cwd: Path = ROOT, env_extra: dict | None = None) -> subprocess.CompletedProcess[str]:
    """``batchscope ARGS`` in its own interpreter (``python -m harness``), from ``cwd``; its output captured."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def write(tmp_path: Path, text: str) -> Path:
    """``text`` as the experiment file ``tmp_path/exp.toml``."""
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p
