"""Issue 50, item 1: a framework's environment needs the framework and numpy, nothing of batchscope's.

A venv made from scratch as a user would (``python -m venv``, then ``pip install torch==2.13.0 numpy`` with this
machine's pip configuration, which serves its CPU torch wheel) runs a trial, a max-batch search and ``--verify``
through ``--python``; a plugin whose requirements are its framework (and numpy) builds its environment and runs.
Each checks first that nvidia-ml-py (the ``pynvml`` that was once required) and batchscope's other dependencies are
not there, so a passing test means what it says.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import registry
from harness.cli import main
from harness.store import Store
from tests.envs.test_faults import _toml
from tests.helpers.shared import RUNS, once

pytestmark = [pytest.mark.slow, pytest.mark.process]

#: batchscope's own dependencies (pyproject's), none of which a framework's environment needs
PARENT_ONLY = ("pynvml", "psutil", "pandas", "rich")


def _absent(python: str) -> list[str]:
    """Which of :data:`PARENT_ONLY` cannot be found in ``python`` (all of them, for an environment of its own)."""
    code = "import importlib.util, json; print(json.dumps([m for m in %r if importlib.util.find_spec(m) is None]))"
    done = subprocess.run([python, "-c", code % (PARENT_ONLY,)], capture_output=True, text=True, check=True,
                          cwd="/")
    return list(json.loads(done.stdout))


@pytest.fixture(scope="session")
def own_venv(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with torch 2.13.0 and numpy alone, made as a user makes one (once per test session: ~90 s here)."""
    with once("own_venv"):
        root = tmp_path_factory.mktemp("own") / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        python = str(root / "bin" / "python")
        done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               "torch==2.13.0", "numpy"], capture_output=True, text=True, timeout=1200, cwd="/")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert _absent(python) == list(PARENT_ONLY)
        return python


@pytest.fixture()
def torch_only_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tests.fakes.env_adapters.TorchOnlyPlugin registered as the plugin ``torchonly``."""
    eps = dict(registry._entry_points())
    eps["torchonly"] = md.EntryPoint(name="torchonly", value="tests.fakes.env_adapters:TorchOnlyPlugin",
                                     group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)
    yield


def test_a_venv_with_only_torch_and_numpy_runs_a_trial(own_venv: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["pytorch"])), "--python", f"pytorch={own_venv}",
                 "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0 and "Traceback" not in printed.err, printed.err
    assert f"pytorch: user ({own_venv}; python" in printed.out
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert (row["status"], row["environment"], row["python"]) == ("ok", "user", own_venv), row["reason"]
    assert json.loads(row["versions_json"])["torch"].startswith("2.13.0")
    assert RUNS["own_venv"] == 1  # made once for the session, however many tests use it


@pytest.mark.alone  # the search's boundary and --verify's peak, under an OS memory limit
def test_a_venv_with_only_torch_and_numpy_runs_a_max_batch_search_and_verify(
        own_venv: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    # the settings of tests/maxbatch/test_answer_holds.py's real --verify test, at a coarser resolution (fewer probes)
    code = main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
                 "--synthetic-shape", "3,64,64", "--memory-limit-mib", "450", "--threads", "1", "--verify",
                 "--settle-steps", "20", "--granularity", "25%", "--python", f"pytorch={own_venv}",
                 "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.out[-2000:] + printed.err[-2000:]
    with Store.open(out, create=False) as store:
        (answer,) = store.maxbatch_results()
        probes = store.trials()
    assert answer["max_batch"] > 0 and answer["verify_status"] == "pass", (answer["verify_status"],
                                                                          printed.out[-2000:])
    assert probes and {(p["environment"], p["python"]) for p in probes} == {("user", own_venv)}
    assert {p["status"] for p in probes} <= {"ok", "oom"}


def test_a_plugin_whose_requirements_are_only_its_framework_builds_and_runs(
        torch_only_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Built in the shared environments' folder, as a user's plugin is (once per machine: named by its
    requirements); its requirements are specifiers, so pip resolves torch's own dependencies."""
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["torchonly"])), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0 and "Traceback" not in printed.err, printed.err
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "ok" and row["environment"].startswith("managed torchonly-cpu@"), row["reason"]
    assert _absent(row["python"]) == list(PARENT_ONLY)
    assert json.loads(row["versions_json"])["torch"].startswith("2.13.0")
