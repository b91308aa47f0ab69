"""Fixtures of the contract suite: which adapters to check, and their probe results (one subprocess each).

By default every adapter registered in the ``batchscope.adapters`` entry-point group is checked;
``pytest tests/contract --adapter NAME`` (repeatable; NAME or ``module:Class``) checks chosen ones, which
is how a third-party adapter's author runs the suite. The framework-dependent work happens in
``python -m tests.contract.probe``, once per adapter per session, so no two frameworks share a process
and the pytest process imports none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.registry import adapter_target, known_adapter_names

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 600
REFERENCE_ADAPTER = "pytorch"  # the other frameworks' numbers are compared with this one's


@dataclass(frozen=True)
class ProbeResult:
    """What ``tests.contract.probe`` found for one adapter."""

    name: str
    target: str
    result: dict[str, Any]
    arrays: dict[str, np.ndarray]
    log: str

    def check(self, name: str) -> dict[str, Any]:
        """One check's record; fails the calling test, with the probe's traceback, if the check raised."""
        record = self.result["checks"].get(name)
        if record is None:
            pytest.fail(
                f"{self.name}: check {name!r} did not run (an earlier check failed?)\n{self.log[-3000:]}"
            )
        if record["error"]:
            pytest.fail(f"{self.name}: check {name!r} raised in the probe:\n{record['error']}")
        return record


def selected_adapters(config: pytest.Config) -> list[str]:
    """The adapters named with --adapter, or every registered one."""
    chosen = config.getoption("--adapter") or []
    return list(chosen) if chosen else sorted(known_adapter_names())


def resolve_target(name: str) -> str:
    """``module:Class`` for a registered name (or the argument itself when it already is one)."""
    return name if ":" in name else adapter_target(name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "adapter_name" in metafunc.fixturenames:
        metafunc.parametrize("adapter_name", selected_adapters(metafunc.config))


def run_probe(name: str, out_dir: Path) -> ProbeResult:
    """Run the probe for one adapter in a fresh interpreter and load what it wrote."""
    target = resolve_target(name)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.contract.probe", "--target", target, "--out", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        cwd=PROJECT_ROOT,
        env=env,
    )
    log = proc.stdout + proc.stderr
    result_path = out_dir / "result.json"
    if proc.returncode != 0 or not result_path.exists():
        pytest.fail(f"the contract probe for {name!r} ({target}) exited {proc.returncode}:\n{log[-4000:]}")
    with np.load(out_dir / "reference.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return ProbeResult(name, target, json.loads(result_path.read_text()), arrays, log)


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ProbeResult]:
    """``probe(name)``: the adapter's probe result, computed once per session."""
    cache: dict[str, ProbeResult] = {}

    def get(name: str) -> ProbeResult:
        if name not in cache:
            cache[name] = run_probe(name, tmp_path_factory.mktemp(f"probe-{name.replace(':', '-')}"))
        return cache[name]

    return get
