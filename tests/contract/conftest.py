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

from harness.registry import adapter_target, framework_modules, known_adapter_names, list_adapters

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


def _not_installed(name: str) -> str | None:
    """Why a registered adapter cannot run here (its framework is not installed), or None."""
    if ":" in name:
        return None
    info = next((a for a in list_adapters() if a.name == name), None)
    if info is None or info.installed:
        return None
    return f"{name}: its framework ({info.distribution}) is not installed in this environment"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "adapter_name" in metafunc.fixturenames:
        params = []
        for name in selected_adapters(metafunc.config):
            # A real absence (an environment without that framework) is a skip that says so; CI installs
            # every built-in framework (`all` extra), and an adapter named with --adapter is never skipped.
            reason = None if metafunc.config.getoption("--adapter") else _not_installed(name)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(name, id=name, marks=marks))
        metafunc.parametrize("adapter_name", params)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def import_loads(module: str, attr: str = "") -> list[str]:
    """The framework modules that importing ``module`` loads, in a fresh interpreter.

    Which modules are frameworks comes from the registry (every registered adapter's ``import_name`` and
    ``framework_modules``) and, when ``attr`` names the adapter class, from that class too (read after the
    import), so an adapter given as ``module:Class`` is judged by its own framework even when not registered.
    """
    known = sorted(framework_modules())
    own = (f"cls = getattr(sys.modules[{module!r}], {attr!r})\n"
           "names |= {str(m).partition('.')[0] for m in (cls.import_name, *getattr(cls, 'framework_modules', ()))}\n"
           ) if attr else ""
    code = (f"import json, sys\nimport {module}\nnames = set({known!r})\n{own}"
            "print(json.dumps(sorted(m for m in names if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PROJECT_ROOT, env=_env())
    if proc.returncode != 0:
        pytest.fail(f"importing {module} failed:\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def run_probe(name: str, out_dir: Path, checks: tuple[str, ...] | None = None) -> ProbeResult:
    """Run the probe for one adapter in a fresh interpreter and load what it wrote."""
    target = resolve_target(name)
    extra = ["--checks", ",".join(checks)] if checks else []
    proc = subprocess.run(
        [sys.executable, "-m", "tests.contract.probe", "--target", target, "--out", str(out_dir), *extra],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        cwd=PROJECT_ROOT,
        env=_env(),
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
