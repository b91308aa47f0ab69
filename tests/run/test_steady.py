"""The steady phase after the final evaluation (issue 29): training steps off the headline clock on a GPU only,
measured by the sampler as a window of its own (fake adapter, fake clock: no GPU)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.config.experiment import parse_experiment
from harness.monitor.windows import Aggregator, trial_aggregates
from harness.run.protocol import PHASES, Message, Phase, SetupFacts
from harness.run.worker.steady import run_steady
from harness.run.worker.steps import StepRunner
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter


class Clock:
    """Advances 0.25 s per step the fake adapter trains."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _runner(clock: Clock, batch_size: int = 4) -> tuple[StepRunner, FakeAdapter]:
    adapter = FakeAdapter()
    adapter.classes = 2
    trial = make_trial(batch_size=batch_size)
    x = np.zeros((16, 3, 8, 8), np.float32)
    y = np.zeros(16, np.int64)
    runner = StepRunner(adapter, trial, x, y, 16)
    real = adapter.train_step

    def step(batch: object) -> float:
        clock.t += 0.25
        return real(batch)

    adapter.train_step = step  # type: ignore[method-assign]
    return runner, adapter


def test_on_a_gpu_it_runs_steps_for_its_seconds_between_two_announced_phases():
    clock = Clock()
    runner, adapter = _runner(clock)
    said: list[str] = []
    order = np.arange(16)[None, :]
    n = run_steady(runner, order, 2.0, SetupFacts(device="cuda:0", gpu_name="NVIDIA H100 80GB HBM3"), 10,
                   said.append, clock)
    assert n == 8 and adapter.steps == 8 and clock.t == pytest.approx(2.0)
    assert said == ["steady", "finish"] and set(said) <= set(PHASES)


@pytest.mark.parametrize(("steady_s", "facts"), [(2.0, SetupFacts(device="cpu")), (0.0, SetupFacts(gpu_name="x"))])
def test_on_a_cpu_or_at_0_s_it_runs_nothing_and_announces_nothing(steady_s, facts):
    clock = Clock()
    runner, adapter = _runner(clock)
    said: list[str] = []
    assert run_steady(runner, np.arange(16)[None, :], steady_s, facts, 0, said.append, clock) == 0
    assert said == [] and adapter.steps == 0


def test_the_key_defaults_to_2_s_on_a_gpu_0_on_a_cpu_and_leaves_the_hash_alone():
    from harness.run.planner import _trial

    base = {"name": "s", "frameworks": ["pytorch"], "batch_sizes": [4]}
    assert parse_experiment(base).steady_s == 2.0
    assert parse_experiment({**base, "steady_s": 0}).steady_s == 0.0
    with pytest.raises(Exception, match="steady_s"):
        parse_experiment({**base, "steady_s": -1})

    class Data:
        key = "k"

    gpu = _trial(parse_experiment({**base, "device": "gpu"}), "", "pytorch", 4, 0, {}, Data())  # type: ignore[arg-type]
    cpu = _trial(parse_experiment({**base, "device": "cpu"}), "", "pytorch", 4, 0, {}, Data())  # type: ignore[arg-type]
    assert gpu.steady_s == 2.0 and cpu.steady_s == 0.0
    assert make_trial(steady_s=2.0).trial_hash == make_trial().trial_hash  # old stores keep their hashes


def test_the_steady_window_gives_its_own_figures_and_j_per_sample_beside_the_headline(tmp_path):
    """Fake NVML-like samples: a 48 ms timed phase (unreadable) and a 2 s steady phase (readable)."""
    from harness.records import MonitorResult, TrialOutcome
    from harness.store import Store

    agg = Aggregator(0.1)
    energy = 0
    for i in range(50):
        energy += 25_000  # 250 W
        agg.add(i * 0.1, {"gpu_util_pct": 97.0, "power_w": 250.0, "energy_mj": energy})
    phases = [("setup", 0.0), ("warmup", 1.0), ("timed", 1.2), ("eval", 1.248), ("steady", 2.0), ("finish", 4.0)]
    mon = MonitorResult(aggregates=trial_aggregates(agg.summarise(phases)))
    trial = make_trial(batch_size=64, timed_steps=10, device="gpu")
    outcome = TrialOutcome(trial=trial, status="ok", monitor=mon,
                           phase_steps={"warmup": 2, "timed": 10, "train": 0, "steady": 125})
    with Store.open(tmp_path) as store:
        store.write_trial(outcome, run_id=1, env={})
        row = store.trials()[0]
    assert row["gpu_util_pct"] is None and row["j_per_sample"] is None  # the headline window is unreadable
    assert row["steady_gpu_util_pct"] == pytest.approx(97.0) and row["steady_power_w"] == pytest.approx(250.0)
    assert row["steady_energy_j"] == pytest.approx(500.0) and row["steady_window_s"] == pytest.approx(2.0)
    assert row["steady_j_per_sample"] == pytest.approx(500.0 / (64 * 125))
    assert row["readings_note"].startswith("timed phase: 48 ms")


class GpuFake(FakeAdapter):
    """The fake adapter, saying it runs on a GPU (the steady phase's condition)."""

    def setup(self, runtime):  # type: ignore[no-untyped-def]
        return dataclasses.replace(super().setup(runtime), device="cuda:0", gpu_name="Fake GPU", math_mode_seen="ieee")


@pytest.mark.process
def test_a_worker_on_a_gpu_runs_the_steady_phase_after_the_final_evaluation_off_the_headline(tiny_data, tmp_path):
    from harness.records import TrialUnit
    from harness.run.executor import LocalExecutor

    def run(target: str, steady_s: float):  # type: ignore[no-untyped-def]
        spec = make_trial(steady_s=steady_s, timed_steps=3)
        unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)), adapter_target=target)
        events: list[Message] = []
        return LocalExecutor(log_dir=tmp_path).run(unit, on_event=events.append), events

    outcome, events = run("tests.run.test_steady:GpuFake", 0.3)
    assert outcome.status == "ok", outcome.reason
    assert [e.phase for e in events if isinstance(e, Phase)] == ["setup", "warmup", "timed", "eval", "steady",
                                                                      "finish"]
    assert outcome.phase_steps["steady"] > 0 and len(outcome.step_times_ms) == 4  # steady steps are not timed
    assert outcome.metrics.timed_steps_n == 3
    cpu, events = run("tests.fakes.adapter:FakeAdapter", 0.3)  # the same key on a CPU: no steady phase
    assert cpu.status == "ok" and "steady" not in cpu.phase_steps
    assert "steady" not in [e.phase for e in events if isinstance(e, Phase)]
