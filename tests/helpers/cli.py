"""The command line as a user runs it, on an experiment file: ``batchscope`` in a process of its own (:func:`bs`), or
its entry point called in the test process (:func:`cli`) where the process is not the subject."""

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


def cli(*args: str, cwd: Path = ROOT, env_extra: dict | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`bs`'s command called in the test process (tests/helpers/inprocess.py): the same argv, exit code and
    output, without an interpreter's start-up."""
    from tests.helpers.inprocess import cli as in_process

    return in_process(args, env=dict(os.environ, **(env_extra or {})), cwd=cwd)


def write(tmp_path: Path, text: str) -> Path:
    """``text`` as the experiment file ``tmp_path/exp.toml``."""
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p
