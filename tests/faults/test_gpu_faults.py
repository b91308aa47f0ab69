"""Issue 32, item 4, and issue 31, item 5: GPU faults, with fakes (no GPU here).

* cuBLAS / cuDNN failing to allocate their workspace and XLA's RESOURCE_EXHAUSTED are out of memory (they were
  errors: retried, and they aborted the max-batch search);
* a CUDA error that is not out of memory (an illegal address, a launch failure) is an ``error`` row with its text,
  never ``oom`` and never ``ok``;
* a GPU that falls off the bus while the worker runs (NVML: "GPU is lost" in the sampler's gaps) makes the trial an
  ``error`` saying so, even where the worker reports a result;
* another process taking the GPU's memory during a trial, or since a search's first probe, makes an out-of-memory
  failure an ``error`` saying so: not the model's limit, not a boundary.

The fake adapter raises each CUDA fault as PyTorch words it, at batch sizes >= 64 (tests/fakes/adapter.py); the
sampler's view is a stand-in monitor whose samples the test writes.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from adapters.base import is_generic_oom
from harness.records import MonitorResult, NullMonitor, TrialUnit
from harness.run import gpufaults
from harness.run.executor import LocalExecutor, classify
from harness.run.protocol import WorkerReport
from tests.conftest import make_trial
from tests.fakes.adapter import GPU_FAULT_ERRORS, FakeAdapter
from tests.faults.helpers import cli, fake_experiment, rows

OOM_FAULTS = ("cublas_alloc", "cudnn_alloc", "xla_exhausted")
OTHER_FAULTS = ("illegal_address", "launch_failure")


@pytest.mark.process
@pytest.mark.parametrize("fault", OOM_FAULTS + OTHER_FAULTS)
def test_a_cuda_fault_in_a_sweep_is_stored_with_its_reason_as_oom_only_when_it_is_memory(tmp_path: Path,
                                                                                         fault: str) -> None:
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64])
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), behaviour=fault)
    assert done.returncode == 0, done.stderr
    by_batch = {r["batch_size"]: r for r in rows(tmp_path / "out")}
    assert by_batch[4]["status"] == "ok"
    faulty = by_batch[64]
    assert faulty["status"] == ("oom" if fault in OOM_FAULTS else "error"), faulty
    assert GPU_FAULT_ERRORS[fault].split(":")[0] in faulty["reason"], faulty["reason"]


def test_a_worker_that_aborts_printing_a_cublas_allocation_failure_is_oom() -> None:
    """Where the worker dies without a report (an abort in C++), its stderr decides."""
    for text in ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "RESOURCE_EXHAUSTED"):
        status, reason = classify(WorkerReport(), -signal.SIGABRT, False, 60.0, f"terminate: {text}\n", ())
        assert status == "oom" and text in reason
    status, _ = classify(WorkerReport(), -signal.SIGABRT, False, 60.0,
                         "CUDA error: an illegal memory access was encountered\n", ())
    assert status == "crashed"


def test_the_shared_oom_rule_knows_the_allocation_failures_and_not_the_other_cuda_errors() -> None:
    assert all(is_generic_oom(RuntimeError(GPU_FAULT_ERRORS[f])) for f in OOM_FAULTS)
    assert not any(is_generic_oom(RuntimeError(GPU_FAULT_ERRORS[f])) for f in OTHER_FAULTS)


def _sample(used: float = 1000.0, own: float = 500.0, gap: str | None = None) -> dict[str, Any]:
    return {"gpu_mem_used_mib": used, "proc_gpu_mem_mib": own, "gap_reason": gap}


def test_a_lost_gpu_is_an_error_whatever_the_worker_said() -> None:
    samples = [_sample(), _sample(gap="nvml: NVML utilization: GPU is lost"), _sample()]
    for status in ("ok", "oom", "crashed"):
        judged, reason = gpufaults.judge(status, "", samples)
        assert judged == "error" and "GPU was lost" in reason and status in reason


def test_out_of_memory_while_another_process_took_the_gpu_is_not_the_models_limit() -> None:
    grew = [_sample(used=1000, own=500), _sample(used=3000, own=600)]  # others: 500 -> 2,400 MiB
    assert gpufaults.judge("oom", "CUDA out of memory", grew)[0] == "error"
    assert "another process took 1,900 MiB" in gpufaults.judge("oom", "CUDA out of memory", grew)[1]
    steady = [_sample(used=1000, own=500), _sample(used=4000, own=3450)]  # the worker's own growth
    assert gpufaults.judge("oom", "CUDA out of memory", steady) == ("oom", "CUDA out of memory")
    assert gpufaults.judge("ok", "", grew) == ("ok", "")  # it fitted anyway: a result
    # taken between two probes: this probe saw 2,500 MiB of others throughout, the search's first 500
    between = [_sample(used=3000, own=500), _sample(used=3100, own=600)]
    assert gpufaults.judge("oom", "x", between)[0] == "oom"
    assert gpufaults.judge("oom", "x", between, foreign_before_mib=500.0)[0] == "error"


class _Monitor(NullMonitor):
    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.samples = samples

    def stop(self) -> MonitorResult:
        return MonitorResult(samples=self.samples)


@pytest.mark.process
def test_a_trial_whose_gpu_fell_off_the_bus_is_stored_as_an_error_not_ok(tiny_data: Any, tmp_path: Path) -> None:
    """The worker finishes (the fake trains on the CPU) while NVML said the GPU was lost: not a silent success."""
    trial = make_trial(timeout_s=60.0)
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target="tests.fakes.adapter:FakeAdapter", oom_patterns=FakeAdapter.oom_stderr_patterns)
    lost = [_sample(), _sample(gap="nvml: NVML memory: GPU is lost")]
    outcome = LocalExecutor(log_dir=tmp_path, monitor_factory=lambda u: _Monitor(lost)).run(unit)
    assert outcome.status == "error" and "GPU was lost" in outcome.reason, outcome.reason
    assert outcome.metrics is not None  # what the worker sent is kept beside the verdict
    ok = LocalExecutor(log_dir=tmp_path, monitor_factory=lambda u: _Monitor([_sample()])).run(unit)
    assert ok.status == "ok", ok.reason


class _Card:
    """A stand-in executor for a max-batch search on a GPU: each call's outcome and the sampler's view of it."""

    def __init__(self, calls: list[tuple[str, float]]) -> None:
        self.calls = calls  # (status, other processes' MiB during the run), in call order

    def run(self, unit: TrialUnit, on_event: Any = None) -> Any:
        from harness.records import TrialOutcome

        status, others = self.calls.pop(0)
        samples = [_sample(used=others + 500.0, own=500.0)]
        reason = "CUDA out of memory" if status == "oom" else ""
        return TrialOutcome(trial=unit.trial, status=status, reason=reason,  # type: ignore[arg-type]
                            monitor=MonitorResult(samples=samples))


@pytest.mark.parametrize(("others_later_mib", "expected"), [(500.0, "oom"), (3000.0, "error")])
def test_a_probe_that_runs_out_of_memory_after_another_process_took_the_gpu_is_no_boundary(
        tiny_data: Any, monkeypatch: pytest.MonkeyPatch, others_later_mib: float, expected: str) -> None:
    """Batch 1 ran with 500 MiB held by others; batch 16 ran out of memory with ``others_later_mib`` held: taken
    between the two probes, it is an error naming the memory taken (the search retries it, then stops saying so),
    never the boundary; with the same 500 MiB it is the model's out of memory."""
    from harness.maxbatch.budget import Budget
    from harness.maxbatch.probes import WorkerProber
    from harness.maxbatch.request import MaxBatchRequest
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)
    req = MaxBatchRequest(framework="fake", model="tiny_cnn", device="gpu", synthetic_shape=(1, 8, 8))
    budget = Budget(81559.0, "gpu-card", "gpu", None, 0.0)
    prober = WorkerProber(req, budget, tiny_data, _Card([("ok", 500.0), ("oom", others_later_mib)]))  # type: ignore[arg-type]
    assert prober(1, False).status == "ok"
    result = prober(16, False)
    assert result.status == expected, result
    if expected == "error":
        assert "another process took 2,500 MiB of the GPU" in result.reason
