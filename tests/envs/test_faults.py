"""Issue 38, item 10, at the level of a sweep: a framework whose environment cannot be built has its trials stored
as errors carrying the installer's lines while the others run; an environment deleted during a sweep is rebuilt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.envs.resolve import managed_interpreter
from harness.records import TrialUnit
from harness.run.executor import LocalExecutor
from harness.store import Store
from tests.conftest import make_trial

#: every test here starts a process (a worker, an interpreter, pip, a mount): `make test` only, not test-fast
pytestmark = pytest.mark.process


def _toml(path: Path, frameworks: list[str]) -> Path:
    path.write_text("\n".join([
        'name = "envfaults"', f"frameworks = {json.dumps(frameworks)}", 'model = "tiny_cnn"', 'dataset = "synthetic"',
        "synthetic_shape = [1, 8, 8]", "synthetic_samples = 64", "synthetic_classes = 3", "batch_sizes = [8]",
        "warmup_steps = 1", "timed_steps = 2", "timeout_s = 120", "eval_points = 0", 'device = "cpu"']) + "\n")
    return path


def test_a_framework_whose_environment_fails_is_stored_as_errors_and_the_others_run(
        env_fakes: None, envs_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["fake", "brokenenv"])), "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0 and "Traceback" not in printed.err, printed.err
    assert "brokenenv: its environment could not be built" in printed.out
    with Store.open(out, create=False) as store:
        rows = {r["framework"]: r for r in store.trials()}
    assert rows["fake"]["status"] == "ok" and rows["fake"]["environment"] == "parent"
    broken = rows["brokenenv"]
    assert broken["status"] == "error" and broken["reason"].startswith("not started: managed brokenenv-cpu@")
    assert "batchscope-no-such-distribution" in broken["stderr_tail"]  # the installer's own lines
    assert not list(envs_dir.glob("brokenenv-*"))  # nothing that looks built


def test_an_environment_deleted_during_a_sweep_is_rebuilt_before_the_next_trial(
        env_fakes: None, envs_dir: Path, tiny_data: object, tmp_path: Path) -> None:
    interp = managed_interpreter("npenv", "cpu")
    assert interp.problem is None
    shutil.rmtree(Path(interp.python).parents[1])  # gone after it was chosen, before this trial starts
    spec = make_trial(framework="npenv", adapter_options={"behaviour": "ok"}, epochs=1, batch_size=8)
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target="tests.fakes.env_adapters:NumpyEnvAdapter", python=interp.python,
                     pythonpath=interp.pythonpath, environment=interp.environment, env_spec=interp.spec)
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "ok", (outcome.reason, outcome.stderr_tail)
    assert Path(interp.python).exists() and outcome.python == interp.python
    assert outcome.environment == interp.environment
