"""Results stores the report tests build from: one real CPU sweep, one clearly made-up GPU replay.

* :func:`make_cpu_store`: a REAL tiny sweep (PyTorch on CPU, scikit-learn's digits, 2 batch sizes x 2
  repeats, one epoch so accuracy is measured), run through :func:`harness.run.sweep.run_sweep` exactly
  as ``batchscope run`` runs it.
* :func:`make_gpu_replay_store`: trial rows written through :meth:`harness.store.Store.write_trial`
  whose monitor aggregates and samples come from the sampler fed by :class:`harness.monitor.probes.ReplayProbe`
  over :func:`harness.monitor.probes.synthetic_gpu_stream`, plus a max-batch row from the real search over a
  simulated prober. NOTHING in it is a measurement: the run's command line and the environment's
  ``gpu_note`` say so, and the report prints both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.base import OptimizerSpec
from harness.config.experiment import parse_experiment
from harness.config.trial import TrialSpec
from harness.maxbatch.answer import ModelSize, Provenance, answer_record
from harness.maxbatch.budget import Budget
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import ProbeResult, SearchSettings, search
from harness.models import build_description
from harness.monitor.probes import ReplayProbe, synthetic_gpu_stream
from harness.monitor.sampler import Sampler, monitor_factory_for
from harness.records import MonitorResult, TrialOutcome, WorkerMetrics
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store

MADE_UP = "MADE-UP test fixture: synthetic_gpu_stream replayed through the sampler, NOT a measurement"
GPU_EXPERIMENT = "gpu_replay_madeup"
GPU_FRAMEWORKS = ("pytorch", "tensorflow")
GPU_BATCHES = (8, 32, 128)
GPU_OOM = ("tensorflow", 256)  # one size that "ran out of memory", so the failure marks are drawn
REPLAY_CARD_MIB = 16384.0


def make_cpu_store(out: Path, cache_dir: Path) -> Path:
    """A real tiny PyTorch CPU sweep into ``out`` (about 4 worker processes)."""
    exp = parse_experiment({
        "name": "cpu_digits", "frameworks": ["pytorch"], "model": "tiny_cnn", "dataset": "digits",
        "train_samples": 256, "batch_sizes": [16, 64], "epochs": 1, "warmup_steps": 1, "timed_steps": 3,
        "threads": 1, "repeats": 2, "device": "cpu", "timeout_s": 120,
    }, source="inline")
    factory, _ = monitor_factory_for(exp)  # the sampler `batchscope run` uses: CPU % and RSS of the worker
    result = run_sweep(exp, out, SweepOptions(cache_dir=cache_dir, monitor_factory=factory,
                                              command="pytest tests/test_report.py (real CPU sweep)"))
    bad = [(o.status, o.reason) for o in result.outcomes if o.status != "ok"]
    assert not bad, bad
    return out


class _FakeClock:
    """Time that moves only when the sampler waits, so a replay takes no real time."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def wait(self, timeout_s: float) -> bool:
        self.t += timeout_s
        return False


class _FixedTree:
    def __init__(self, pid: int) -> None:
        self.pids = frozenset({pid})

    def refresh(self) -> frozenset[int]:
        return self.pids


def _replayed_monitor(framework: str, batch: int, repeat: int) -> MonitorResult:
    """What the sampler returns for a made-up stream that grows with the batch size."""
    watts_per_sample = 0.8 if framework == "pytorch" else 1.1
    rows = synthetic_gpu_stream(30, interval_s=0.1, busy_from=0.3, busy_w=120.0 + batch * watts_per_sample + repeat)
    grow = 1.4 if framework == "tensorflow" else 1.0
    for i, r in enumerate(rows):
        busy = r["gpu_util_pct"] > 0
        util = 20.0 + (12.0 if framework == "pytorch" else 9.0) * batch.bit_length() + (i % 3) + repeat
        r["gpu_util_pct"] = min(99.0, util) if busy else 0.0
        r["proc_gpu_mem_mib"] = (600.0 + grow * 6.0 * batch + repeat) if busy else 0.0
        r["gpu_mem_used_mib"] = r["proc_gpu_mem_mib"] + 300.0
        r.update(cpu_util_pct=100.0, rss_mib=900.0 + batch)
    clock = _FakeClock()
    sampler = Sampler([ReplayProbe(rows)], interval_s=0.1, clock=clock, wait=clock.wait,
                      tree_factory=_FixedTree, notes=[MADE_UP])
    sampler.start(4242)
    for name, t in (("setup", 100.05), ("warmup", 100.95), ("timed", 101.15), ("eval", 102.85)):
        sampler.phase(name, t)
    assert sampler._thread is not None
    sampler._thread.join(timeout=10)  # the replay's end ends the thread
    return sampler.stop()


def _gpu_trial(framework: str, batch: int, repeat: int) -> TrialSpec:
    return TrialSpec(experiment=GPU_EXPERIMENT, framework=framework, model="tiny_cnn", dataset="synthetic",
                     batch_size=batch, repeat=repeat, seed=repeat, epochs=0, warmup_steps=2, timed_steps=5,
                     optimizer=OptimizerSpec(lr=0.01), device="gpu", threads=1, timeout_s=60.0, eval=True,
                     eval_batch_size=32)


def make_gpu_replay_store(out: Path) -> Path:
    """The made-up GPU store (see the module docstring); returns ``out``."""
    env = {"gpu_name": "ReplayGPU (made-up)", "gpu_memory_mib": REPLAY_CARD_MIB, "gpu_note": MADE_UP,
           "gpus": [{"name": "ReplayGPU (made-up)", "memory_total_mib": REPLAY_CARD_MIB}],
           "cpu_model": "test fixture", "cpu_count": 2, "os": "test", "python": "3.11"}
    spec = {"name": GPU_EXPERIMENT, "frameworks": list(GPU_FRAMEWORKS), "model": "tiny_cnn",
            "dataset": "synthetic", "batch_sizes": [*GPU_BATCHES, GPU_OOM[1]], "epochs": 0, "repeats": 2,
            "device": "gpu", "precision": "fp32", "optimizer": "sgd", "learning_rate": 0.01,
            "warmup_steps": 2, "timed_steps": 5, "sample_interval_ms": 100.0,
            "description": MADE_UP}
    with Store.open(out) as store:
        run_id = store.begin_run(GPU_EXPERIMENT, spec, f"({MADE_UP})", env)
        for fw in GPU_FRAMEWORKS:
            for batch in GPU_BATCHES:
                for repeat in (0, 1):
                    monitor = _replayed_monitor(fw, batch, repeat)
                    step_ms = 2.0 + batch * (0.05 if fw == "pytorch" else 0.07) + 0.1 * repeat
                    steps = [step_ms] * 7
                    store.write_trial(TrialOutcome(
                        trial=_gpu_trial(fw, batch, repeat), status="ok", param_count=1000,
                        metrics=WorkerMetrics(
                            step_samples_per_s=batch / step_ms * 1000.0,
                            e2e_samples_per_s=batch / (step_ms * 1.2) * 1000.0, step_time_ms_median=step_ms,
                            step_time_ms_iqr=0.01, measured_steps_n=5, cpu_denormals="flush",
                            framework_peak_mib=400.0 + (5.0 if fw == "pytorch" else 6.5) * batch,
                            warmup_steps_n=2, timed_steps_n=5),
                        step_times_ms=steps, phase_steps={"warmup": 2, "timed": 5},
                        versions={fw: "made-up"}, device={"device": "cuda:0"}, monitor=monitor), run_id, env)
        fw, batch = GPU_OOM
        for repeat in (0, 1):
            store.write_trial(TrialOutcome(trial=_gpu_trial(fw, batch, repeat), status="oom",
                                           reason="ResourceExhaustedError: OOM (made-up)"), run_id, env)
        _write_maxbatch(store, run_id, env)
    return out


def _write_maxbatch(store: Store, run_id: int, env: dict[str, Any]) -> None:
    """A max-batch row from the real search over a simulated memory model (a + b * batch MiB)."""
    req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="gpu", experiment=GPU_EXPERIMENT)
    budget = Budget(mib=REPLAY_CARD_MIB, kind="gpu-card", device="gpu", os_limit_mib=None, trial_limit_mib=0.0)

    def simulated(batch: int, confirm: bool) -> ProbeResult:
        need = 600.0 + 6.0 * batch
        if need > budget.mib:
            return ProbeResult(batch, "oom", reason="out of memory (simulated)", elapsed_s=0.1)
        return ProbeResult(batch, "ok", peak_mib=need, elapsed_s=0.1)

    result = search(simulated, SearchSettings(budget_mib=budget.mib))
    desc = build_description("tiny_cnn", (3, 32, 32), 10)
    store.write_maxbatch(answer_record(req, budget, result, [],
                                       ModelSize(desc.param_count(), desc.activation_floats_per_sample()),
                                       Provenance(run_id, env)))
