"""tests/scheduling.py under xdist, on dummy suites (issue 53): a shared unit's modules run in one worker, and a
shared run made in two workers fails the run, whatever scheduler split it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import scheduling

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import os
import time

import pytest

import tests.scheduling as scheduling
from tests.helpers.shared import once

pytest_plugins = ["tests.scheduling"]
scheduling.SHARED_UNITS.clear()
scheduling.SHARED_UNITS["pair"] = scheduling.SharedUnit(("shared",), PAIR_MODULES)


@pytest.fixture(scope="session")
def shared():
    with once("pair's real run"):
        time.sleep(0.3)
    return "made"


def pytest_runtest_logreport(report):
    if report.when == "setup" and "PYTEST_XDIST_WORKER" in os.environ:  # also where the shared fixture failed
        with open(os.environ["WHERE_LOG"], "a") as f:
            f.write(f"{report.nodeid} {os.environ.get('PYTEST_XDIST_WORKER', 'none')}\\n")
"""


def _module(name: str, shared: bool) -> str:
    arg = "shared" if shared else ""
    body = "    assert shared == 'made'\n" if shared else "    time.sleep(0.2)\n"
    return "import time\n\n" + "".join(f"\ndef test_{name}{i}({arg}):\n{body}" for i in range(4))


def _run(tmp_path: Path, *args: str, unit: tuple[str, ...] = ("test_a.py", "test_b.py"),
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(CONFTEST).replace("PAIR_MODULES", repr(unit)))
    (suite / "pytest.ini").write_text("[pytest]\n")
    for name, shared in (("a", True), ("b", True), ("c", False), ("d", False)):
        (suite / f"test_{name}.py").write_text(_module(name, shared))
    log = tmp_path / "where.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WHERE_LOG": str(log)}
    env.pop("BATCHSCOPE_TEST_RUN_DIR", None)  # this test's own worker's, not the inner run's
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning",
            "-n", "2", *args]
    proc = subprocess.run(argv, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    where = dict(line.split() for line in log.read_text().splitlines()) if log.exists() else {}
    return proc, where


@pytest.mark.process
def test_a_shared_units_modules_run_in_one_worker_and_its_run_is_made_once(tmp_path: Path) -> None:
    proc, where = _run(tmp_path, "--dist", "loadfile")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(where) == 16, where
    shared = {worker for nodeid, worker in where.items() if nodeid.startswith(("test_a.py", "test_b.py"))}
    assert len(shared) == 1, f"the shared unit split over workers {sorted(shared)}: {where}"
    assert set(where.values()) == {"gw0", "gw1"}, f"one worker did everything: {where}"


@pytest.mark.process
def test_a_shared_run_made_in_two_workers_fails_the_run_naming_both(tmp_path: Path) -> None:
    # xdist's `each` runs every test in every worker: the split at its plainest, and deterministic (`load`, which
    # spreads tests one by one, kept this pair in one worker once in five)
    proc, _ = _run(tmp_path, "--dist", "each")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "the shared run \"pair's real run\" started in worker gw" in proc.stdout, proc.stdout[-3000:]
    assert "after worker gw" in proc.stdout
    assert "1 error" in proc.stdout.splitlines()[-1] or "errors" in proc.stdout.splitlines()[-1], proc.stdout[-500:]


def _item(nodeid: str, *fixtures: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))


def test_a_module_reading_a_shared_fixture_unlisted_is_named() -> None:
    items = [_item("tests/contract/test_contract.py::test_x[jax]", "probe"),
             _item("tests/contract/test_new.py::test_y", "tmp_path", "probe"),
             _item("tests/run/test_other.py::test_w", "tmp_path")]
    wrong = scheduling.check_units(items)  # type: ignore[arg-type]
    assert list(wrong) == ["tests/contract/test_new.py::test_y"], wrong
    assert wrong["tests/contract/test_new.py::test_y"].startswith(
        "tests/contract/test_new.py requests probe (the shared run 'contract')")


@pytest.mark.process
def test_under_xdist_a_test_outside_its_shared_unit_fails_saying_so(tmp_path: Path) -> None:
    proc, _ = _run(tmp_path, "--dist", "loadfile", unit=("test_a.py",))  # test_b.py reads the run too, unlisted
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "test_b.py requests shared (the shared run 'pair') but is not one of its modules" in proc.stdout
    assert "INTERNALERROR" not in proc.stdout + proc.stderr


def test_units_are_modules_or_the_shared_units_named() -> None:
    assert scheduling.unit_of("tests/run/test_sweep.py::test_a[x::y]") == "tests/run/test_sweep.py"
    assert scheduling.unit_of("tests/contract/test_legacy_plugin.py::test_b") == "@contract"
    assert scheduling.unit_of("tests/contract/test_broken_adapters.py::test_c") == "@contract"
    assert scheduling.unit_of("tests/run/test_prefetch_frameworks.py::test_d[jax]@framework_sweep") == \
        "@framework_sweep"  # an older pytest's nodeid with xdist's group suffix
