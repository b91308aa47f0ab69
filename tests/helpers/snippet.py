"""Framework code run in a fresh interpreter of the framework's own environment (harness.envs), so that the pytest
process imports no framework (it holds none since 0.2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

from tests import ROOT
from tests.helpers.envs import python_for

#: how a snippet names its framework: its module, or the adapter's package
_FRAMEWORK_WORDS = {"pytorch": r"\btorch\b|adapters\.pytorch",
                    "tensorflow": r"\btensorflow\b|\bkeras\b|adapters\.tensorflow",
                    "jax": r"\bjax\b|adapters\.jax", "mxnet": r"\bmxnet\b|adapters\.mxnet"}


def framework_of(code: str) -> str:
    """The one framework ``code`` uses (what decides its environment)."""
    found = [fw for fw, words in _FRAMEWORK_WORDS.items() if re.search(words, code)]
    if len(found) != 1:
        raise ValueError(f"a snippet runs one framework; this one names {found or 'none'}: pass framework=")
    return found[0]


def run_snippet(code: str, timeout_s: float = 300, framework: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter of its framework's environment (``framework``, else the one the code
    names); it must print one JSON object as its last stdout line."""
    code = textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [python_for(framework or framework_of(code)), "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
