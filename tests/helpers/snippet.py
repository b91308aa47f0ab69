"""Framework code run in a fresh interpreter, so that the pytest process imports no framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests import ROOT


def run_snippet(code: str, timeout_s: float = 300) -> dict:
    """Run ``code`` in a fresh interpreter; it must print one JSON object as its last stdout line."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
