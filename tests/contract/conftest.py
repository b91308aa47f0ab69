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

from harness.envs.resolve import existing_managed
from harness.registry import adapter_target, framework_modules, is_builtin, known_adapter_names
from tests.contract import verdicts
from tests.contract.checks import FAILING_STEP_BATCH
from tests.contract.probe import PROGRESS
from tests.helpers.envs import kind, python_for
from tests.helpers.shared import once
from tests.tiers import ran

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
    builtin: bool = False

    @property
    def import_name(self) -> str:
        return str(self.result.get("import_name") or "")

    def check(self, name: str) -> dict[str, Any]:
        """One check's record. The calling test fails with the probe's traceback if the check raised, fails if a
        built-in adapter lacks a required capability the check needs, and ends as "not supported" (see
        :func:`pytest_report_teststatus`) if the adapter lacks one and did not manage the check anyway."""
        record = self.result["checks"].get(name)
        if record is None:
            pytest.fail(
                f"{self.name}: check {name!r} did not run (an earlier check failed?)\n{self.log[-3000:]}"
            )
        verdict = verdicts.capability_verdict(record, self.builtin, str(self.result.get("name") or self.name), name)
        if verdict is not None:
            kind, message = verdict
            if kind == "fail":
                pytest.fail(message)
            pytest.skip(message)
        if record["error"]:
            pytest.fail(f"{self.name}: check {name!r} raised in the probe:\n{record['error']}")
        return record


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """A case the adapter cannot run, for lack of a capability, reads UNSUPPORTED (letter U) and is counted as
    "unsupported" in the summary line: neither a pass nor an ordinary skip. Underneath it is a skip, so the run's
    exit status and JUnit XML (a <skipped> with the message) treat it as not run."""
    if report.skipped and _skip_reason(report).startswith(verdicts.UNSUPPORTED):
        return "unsupported", "U", ("UNSUPPORTED", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each unsupported case with what it needs, so that an adapter's author reads what to add."""
    reports = terminalreporter.stats.get("unsupported", [])
    if reports:
        terminalreporter.section("not supported: what the adapters lack", sep="-", yellow=True)
        for report in reports:
            terminalreporter.line(f"{report.nodeid}: {_skip_reason(report)}")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return str(text).removeprefix("Skipped: ")


def selected_adapters(config: pytest.Config) -> list[str]:
    """The adapters named with --adapter, or every registered one."""
    chosen = config.getoption("--adapter") or []
    return list(chosen) if chosen else sorted(known_adapter_names())


def resolve_target(name: str) -> str:
    """``module:Class`` for a registered name (or the argument itself when it already is one)."""
    return name if ":" in name else adapter_target(name)


def _not_installed(name: str) -> str | None:
    """Why a registered adapter cannot run here (its framework's environment could not be built), or None."""
    if ":" in name:
        return None
    spec, built = existing_managed(name, kind())  # at collection: read, never build (make test builds them first)
    if spec is not None and built is None:
        return f"{name}: its managed environment {spec.label} is not built (make envs)"
    return None


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


def import_loads(module: str, attr: str = "", framework: str = "") -> list[str]:
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
    # in the framework's own environment (where an import at module level would load it): the adapter class's, or
    # the named framework's for a module without one
    python = python_for(f"{module}:{attr}") if attr else python_for(framework) if framework else sys.executable
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PROJECT_ROOT, env=_env())
    if proc.returncode != 0:
        pytest.fail(f"importing {module} failed:\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


#: ``NAME=DIR`` pairs (``os.pathsep``-separated): probe results another session already computed for these adapters,
#: read instead of probing again. tests/contract/test_legacy_plugin.py hands its own pytest of the suite the
#: reference adapter's probe this way, so that probe runs once per ``make test``.
SHARED_PROBES_ENV = "BATCHSCOPE_CONTRACT_PROBES"
#: where this session's probe of each adapter lies (filled by the ``probe`` fixture)
PROBE_DIRS: dict[str, Path] = {}


def run_probe(name: str, out_dir: Path, checks: tuple[str, ...] | None = None) -> ProbeResult:
    """Run the probe for one adapter in a fresh interpreter and load what it wrote."""
    target = resolve_target(name)
    extra = ["--checks", ",".join(checks)] if checks else []
    proc = subprocess.run(
        [python_for(target), "-m", "tests.contract.probe", "--target", target, "--out", str(out_dir), *extra],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        cwd=PROJECT_ROOT,
        env=_env(),
    )
    log = proc.stdout + proc.stderr
    (out_dir / "log.txt").write_text(log)
    if proc.returncode != 0 or not (out_dir / "result.json").exists():
        pytest.fail(f"the contract probe for {name!r} ({target}) exited {proc.returncode}:\n{log[-4000:]}")
    return load_probe(name, out_dir)


def load_probe(name: str, out_dir: Path) -> ProbeResult:
    """The probe result a run of :func:`run_probe` left in ``out_dir``."""
    target = resolve_target(name)
    log_path = out_dir / "log.txt"
    log = log_path.read_text() if log_path.exists() else ""
    with np.load(out_dir / "reference.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    result = json.loads((out_dir / "result.json").read_text())
    return ProbeResult(name, target, result, arrays, log, builtin=_builtin(name, target))


def shared_probes() -> dict[str, Path]:
    """The probe directories handed over through :data:`SHARED_PROBES_ENV`."""
    pairs = (item.partition("=") for item in os.environ.get(SHARED_PROBES_ENV, "").split(os.pathsep) if item)
    return {name: Path(path) for name, _, path in pairs if name and path}


def _builtin(name: str, target: str) -> bool:
    return is_builtin(target) if ":" in name else is_builtin(name)


def run_failing_step(name: str, out_dir: Path) -> ProbeResult:
    """The ``failing_step`` check in a process of its own, which the framework may end (TensorFlow does).

    The record comes from ``result.json`` when the process lived, else from its progress file: where the process
    died (inside ``train_step``, or in the read after it returned) is the finding.
    """
    target = resolve_target(name)
    proc = subprocess.run(
        [python_for(target), "-m", "tests.contract.probe", "--target", target, "--out", str(out_dir),
         "--checks", "failing_step"],
        capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=PROJECT_ROOT, env=_env(),
    )
    log = proc.stdout + proc.stderr
    result_path = out_dir / "result.json"
    progress = (out_dir / PROGRESS).read_text().splitlines() if (out_dir / PROGRESS).exists() else []
    if proc.returncode == 0 and result_path.exists():
        result = json.loads(result_path.read_text())
    elif progress and (progress[-1] == "call" or progress[-1] == "read" or progress[-1].startswith("returned ")):
        # the process ended inside the step (it did not return), or after it returned (it left its work behind)
        outcome = "died_in_step" if progress[-1] == "call" else "died_in_read"
        result = {"checks": {"failing_step": {"missing": [], "ran": True, "error": None, "outcome": outcome,
                                              "exit_code": proc.returncode}}}
    else:
        pytest.fail(f"the failing-step probe for {name!r} ({target}) exited {proc.returncode} before its step:\n"
                    f"{log[-4000:]}")
    record = result["checks"].get("failing_step")
    if record is not None:  # the step's duration, for the message
        returned = next((line.split()[1] for line in progress if line.startswith("returned ")), None)
        record.update(batch=FAILING_STEP_BATCH, returned_s=float(returned) if returned else float("nan"))
    return ProbeResult(name, target, result, {}, log, builtin=_builtin(name, target))


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ProbeResult]:
    """``probe(name)``: the adapter's probe result, computed once per session."""
    cache: dict[str, ProbeResult] = {}

    def get(name: str) -> ProbeResult:
        if name not in cache:
            shared = shared_probes().get(name)
            if shared is not None:
                cache[name] = load_probe(name, shared)
            else:
                out = tmp_path_factory.mktemp(f"probe-{name.replace(':', '-')}")
                with once(f"probe[{name}]"):
                    cache[name] = run_probe(name, out)
                PROBE_DIRS[name] = out
                if ":" not in name and is_builtin(name):
                    ran(name, "contract probe")  # tests/tiers.py: make test lists the frameworks that really ran
        return cache[name]

    return get


@pytest.fixture(scope="session")
def failing_step_probe(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ProbeResult]:
    """``failing_step_probe(name)``: the adapter's failing-step record, computed once per session."""
    cache: dict[str, ProbeResult] = {}

    def get(name: str) -> ProbeResult:
        if name not in cache:
            with once(f"failing_step_probe[{name}]"):
                cache[name] = run_failing_step(name, tmp_path_factory.mktemp(f"failing-{name.replace(':', '-')}"))
        return cache[name]

    return get
