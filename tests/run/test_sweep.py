"""Sweeps: doomed sizes after an oom, the learning-rate policy, epoch accounting, Ctrl-C and --resume."""

from __future__ import annotations

import importlib.metadata as md
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import registry
from harness.cli import main
from harness.config.experiment import load_experiment, parse_experiment
from harness.data import prepare
from harness.run.planner import data_request, plan
from harness.run.sweep import SweepOptions, changed_settings, run_sweep
from harness.store import Store
from tests import ROOT
from tests.fakes.adapter import OOM_LARGE_BATCH
from tests.faults.helpers import interruptible, rows


@pytest.fixture()
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the framework-free fake adapter as if a plugin had declared the entry point."""
    eps = dict(registry._entry_points())
    eps["fake"] = md.EntryPoint(name="fake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)


def _fake_toml(path: Path, behaviour: str, **extra: object) -> Path:
    lines = ['name = "doomed"', 'frameworks = ["fake"]', 'model = "tiny_cnn"', 'dataset = "synthetic"',
             "synthetic_shape = [1, 8, 8]", "synthetic_samples = 100", "synthetic_classes = 3",
             "batch_sizes = [256, 16, 128, 32, 64]", "warmup_steps = 1", "timed_steps = 2", 'device = "cpu"',
             "timeout_s = 60"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in extra.items()]
    lines += ["[adapters.fake]", f'behaviour = "{behaviour}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _by_batch(out: Path) -> dict[int, dict]:
    with Store.open(out, create=False) as store:
        return {r["batch_size"]: r for r in store.trials()}


@pytest.mark.process
def test_sizes_above_an_oom_are_skipped(fake_registered: None, tmp_path: Path, cache_dir: Path) -> None:
    exp = load_experiment(_fake_toml(tmp_path / "doomed.toml", "oom_large"))
    result = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    rows = _by_batch(tmp_path / "out")
    assert OOM_LARGE_BATCH == 64
    assert {bs: r["status"] for bs, r in rows.items()} == {16: "ok", 32: "ok", 64: "oom", 128: "skipped",
                                                           256: "skipped"}
    assert "larger than batch size 64, which ran out of memory" in rows[128]["reason"]
    assert "--no-skip-larger" in rows[256]["reason"]
    assert rows[128]["elapsed_s"] == 0.0 and len(result.outcomes) == 5  # recorded, never run


@pytest.mark.process
def test_no_skip_larger_runs_them_from_the_cli(fake_registered: None, tmp_path: Path, cache_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    toml = _fake_toml(tmp_path / "doomed.toml", "oom_large")
    assert main(["run", str(toml), "--out", str(tmp_path / "out"), "--no-skip-larger"]) == 0
    rows = _by_batch(tmp_path / "out")
    statuses = {bs: r["status"] for bs, r in rows.items()}
    assert statuses == {16: "ok", 32: "ok", 64: "oom", 128: "oom", 256: "oom"}
    assert "MemoryError: fake: batch 256 does not fit" in rows[256]["reason"]
    # and the default CLI path skips them
    assert main(["run", str(toml), "--out", str(tmp_path / "out2")]) == 0
    assert _by_batch(tmp_path / "out2")[256]["status"] == "skipped"
    assert "skipped" in capsys.readouterr().out


@pytest.mark.process
def test_oom_found_before_a_resume_still_dooms_larger_sizes(fake_registered: None, tmp_path: Path,
                                                            cache_dir: Path) -> None:
    exp = load_experiment(_fake_toml(tmp_path / "doomed.toml", "oom_large"))
    run_sweep(exp.with_overrides(batch_sizes=(16, 64)), tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir, resume=True))
    rows = _by_batch(tmp_path / "out")
    assert rows[64]["status"] == "oom" and rows[128]["status"] == rows[256]["status"] == "skipped"
    assert rows[32]["status"] == "ok"


@pytest.mark.parametrize(("policy", "expected"), [("fixed", [0.01, 0.01, 0.01]),
                                                  ("linear", [0.0025, 0.01, 0.04]),
                                                  ("sqrt", [0.005, 0.01, 0.02])])
def test_lr_policy_reaches_every_trial(policy: str, expected: list[float], tiny_data: object) -> None:
    exp = parse_experiment({"name": "lr", "frameworks": ["pytorch"], "batch_sizes": [128, 8, 32],
                            "learning_rate": 0.01, "lr_base_batch": 32, "lr_policy": policy})
    trials = plan(exp, tiny_data)  # type: ignore[arg-type]
    assert [t.batch_size for t in trials] == [8, 32, 128]
    assert [t.optimizer.lr for t in trials] == pytest.approx(expected)
    # the lr is part of what the worker receives and of the trial's identity
    assert [t.to_dict()["optimizer"]["lr"] for t in trials] == pytest.approx(expected)
    assert len({t.trial_hash for t in trials}) == 3


def test_the_max_batch_budget_does_not_cap_sweep_trials(tiny_data: object) -> None:
    """memory_limit_mib is the max-batch search's budget: a sweep trial must run on the whole device (on a GPU
    the cap would change the memory figures the sweep measures; MXNet would refuse the trial)."""
    exp = parse_experiment({"name": "cap", "frameworks": ["pytorch"], "batch_sizes": [8], "max_batch": True,
                            "memory_limit_mib": 6144})
    (trial,) = plan(exp, tiny_data)  # type: ignore[arg-type]
    assert trial.memory_limit_mib == 0 and trial.purpose == "sweep"


@pytest.mark.process
def test_lr_and_epochs_are_stored_per_trial(fake_registered: None, tmp_path: Path, cache_dir: Path) -> None:
    toml = _fake_toml(tmp_path / "e.toml", "ok", epochs=2, lr_policy="linear", lr_base_batch=16,
                      learning_rate=0.01)
    exp = load_experiment(toml).with_overrides(batch_sizes=(16, 32, 64))
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    rows = _by_batch(tmp_path / "out")
    for bs, r in rows.items():
        assert r["status"] == "ok" and r["lr"] == pytest.approx(0.01 * bs / 16)
        # an epoch is every one of the 100 training samples once, whatever the batch size
        assert r["train_steps_n"] == 2 * -(-100 // bs) and r["epochs_done"] == pytest.approx(2.0)


@pytest.mark.slow
def test_ctrl_c_then_resume_finishes_without_loss_or_repeat(tmp_path: Path) -> None:
    """A real `batchscope run` (PyTorch workers) gets SIGINT mid-sweep; --resume finishes the sweep."""
    toml = tmp_path / "resume.toml"
    toml.write_text("\n".join([
        'name = "resume"', 'frameworks = ["pytorch"]', 'model = "tiny_cnn"', 'dataset = "synthetic"',
        "synthetic_shape = [1, 8, 8]", "synthetic_samples = 64", "synthetic_classes = 3",
        "batch_sizes = [4, 8]", "repeats = 2", "warmup_steps = 1", "timed_steps = 3", "threads = 1",
        'device = "cpu"', "timeout_s = 120"]) + "\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BATCHSCOPE_CACHE=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "harness", "run", str(toml), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)  # SIGINT not ignored even if this suite runs as `cmd &`
    deadline = time.monotonic() + 240
    while len(rows(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "--resume" in err
    before = rows(out)
    assert 2 <= len(before) < 4

    # the same command without --resume is refused, and changes nothing
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr and rows(out) == before

    done = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} trial(s) already stored" in done.stdout
    after = rows(out)
    exp = load_experiment(toml)
    planned = [t.trial_hash for t in plan(exp, prepare(data_request(exp), tmp_path / "cache"))]
    hashes = [r["trial_hash"] for r in after]
    assert sorted(hashes) == sorted(planned) and len(set(hashes)) == 4  # every trial, exactly once
    assert all(r["status"] == "ok" for r in after)
    by_hash = {r["trial_hash"]: r for r in after}
    assert all(by_hash[r["trial_hash"]] == r for r in before)  # pre-interrupt rows untouched
    first_run = {r["run_id"] for r in before}
    assert len(first_run) == 1
    assert sum(r["run_id"] not in first_run for r in after) == 4 - len(before)  # the rest ran once, later


@pytest.mark.process
def test_a_trial_lost_twice_is_stored_lost_and_resume_completes_it(fake_registered: None, tmp_path: Path,
                                                                   cache_dir: Path) -> None:
    """Issue 23: a trial whose node died is written ``lost`` (never dropped), run again once, and left for --resume
    if lost again; --resume runs it (lost is not finished) and replaces its row (never doubled)."""
    from harness.records import TrialOutcome
    from harness.run.executor import LocalExecutor

    exp = load_experiment(_fake_toml(tmp_path / "lost.toml", "ok")).with_overrides(batch_sizes=(16, 32))
    calls: list[int] = []

    class NodeDiesAt16:
        def run(self, unit, on_event=None):  # type: ignore[no-untyped-def]
            calls.append(unit.trial.batch_size)
            if unit.trial.batch_size == 16:
                return TrialOutcome(trial=unit.trial, status="lost", reason="the Ray node running it died")
            return LocalExecutor().run(unit)

    result = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir, executor=NodeDiesAt16()))
    assert calls == [16, 16, 32]  # the re-run once, then the rest of the chain
    assert [o.status for o in result.outcomes] == ["lost", "lost", "ok"]
    assert {b: r["status"] for b, r in _by_batch(tmp_path / "out").items()} == {16: "lost", 32: "ok"}
    again = run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir, resume=True))
    assert again.already_done == 1 and [o.trial.batch_size for o in again.outcomes] == [16]
    with Store.open(tmp_path / "out", create=False) as store:
        assert sorted((r["batch_size"], r["status"]) for r in store.trials()) == [(16, "ok"), (32, "ok")]


def test_ray_only_options_are_refused_on_the_local_executor(fake_registered: None, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    toml = _fake_toml(tmp_path / "local.toml", "ok")
    for extra in (["--max-concurrent", "2"], ["--trials-per-node", "2"]):
        assert main(["run", str(toml), "--out", str(tmp_path / "out"), *extra]) == 2
        assert "--executor ray" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(SystemExit) as e:
        main(["run", str(toml), "--max-concurrent", "0"])
    assert e.value.code == 2 and "1 or more" in capsys.readouterr().err


def test_a_changed_settling_length_is_refused_on_resume_and_the_sweep_sizes_are_not() -> None:
    """A stored max-batch search is not run again on --resume, so a new max_batch_settle_steps would not apply to
    it: named as a change (refused), where the batch sizes, which only choose what runs, are not."""
    stored = {"max_batch_settle_steps": 100, "batch_sizes": [4]}
    assert changed_settings(stored, {"max_batch_settle_steps": 20, "batch_sizes": [4, 8]}) == [
        "max_batch_settle_steps: 100 stored, 20 now"]


@pytest.mark.process
def test_resume_runs_again_a_trial_evaluated_under_the_old_rule_and_says_so(fake_registered: None, tmp_path: Path,
                                                                           cache_dir: Path) -> None:
    """A store made before evaluation points fell by samples holds constant-size trials whose points fell by steps:
    --resume must not keep them beside trials evaluated by the new rule (one cell, two rules), nor do it silently."""
    import sqlite3

    from harness.config.trial import TrialSpec, evaluated_by_steps
    from harness.errors import BatchscopeWarning
    from harness.store import store_path

    exp = load_experiment(_fake_toml(tmp_path / "e.toml", "ok", epochs=1, eval_points=2)).with_overrides(
        batch_sizes=(16, 32))
    out = tmp_path / "out"
    run_sweep(exp, out, SweepOptions(cache_dir=cache_dir))
    with Store.open(out, create=False) as store:
        planned = {r.trial_hash: TrialSpec.from_dict(dict(r.spec or {})) for r in store.trials()}
    new16 = next(h for h, t in planned.items() if t.batch_size == 16)
    old16 = evaluated_by_steps(planned[new16])
    assert old16 is not None
    conn = sqlite3.connect(store_path(out))  # batch 16's rows as a batchscope before the rule stored them
    with conn:
        for table in ("trials", "step_times", "samples", "curve", "gradient_noise"):
            conn.execute(f"UPDATE {table} SET trial_hash = ? WHERE trial_hash = ?", (old16.trial_hash, new16))
    conn.close()
    with pytest.warns(BatchscopeWarning, match=r"1 stored trial\(s\) were evaluated under the old rule"):
        result = run_sweep(exp, out, SweepOptions(cache_dir=cache_dir, resume=True))
    assert result.already_done == 1 and [o.trial.batch_size for o in result.outcomes] == [16]
    with Store.open(out, create=False) as store:
        assert {r.trial_hash for r in store.trials()} == set(planned)  # the old row is gone, not kept beside
        # 7 steps of 16 over 100 samples: points at 33 and 67 samples, after steps 3 and 5 (by the steps: 2 and 5)
        assert [p["step"] for p in store.curves(new16)] == [3, 5, 7]


def test_a_batch_ramp_studys_stored_ramps_go_with_the_constant_trials_they_were_computed_from() -> None:
    import types

    from harness.config.trial import evaluated_by_steps
    from harness.run.sweep import evaluated_by_old_rule
    from tests.conftest import make_trial

    constant = make_trial(batch_size=16, epochs=2, eval_every_samples=500, stop_at_accuracy=90.0)
    old = evaluated_by_steps(constant)
    assert old is not None

    def stored(h: str, framework: str = "fake", variant: str = "") -> object:
        return types.SimpleNamespace(trial_hash=h, settings=types.SimpleNamespace(framework=framework,
                                                                                  variant=variant))

    rows = [stored(old.trial_hash), stored("ramp-fake", variant="ramp"), stored("ramp-other", "other", "ramp"),
            stored(constant.trial_hash)]
    assert evaluated_by_old_rule([constant], rows) == {old.trial_hash}  # type: ignore[arg-type]
    # its ramp was computed from the removed trial's rows: removed too (another framework's is not)
    assert evaluated_by_old_rule([constant], rows, ramp=True) == {old.trial_hash, "ramp-fake"}  # type: ignore[arg-type]
    assert evaluated_by_old_rule([constant], rows[1:], ramp=True) == set()  # type: ignore[arg-type]
