"""Budgets that mean a real card (issue 31, item 5): an emulated card counts the CUDA context the worker holds,
measured in the worker (adapters/gpumem.py, against a patched NVML), stored, and added to the peaks the search reads;
a GPU recommendation leaves at least GPU_MARGIN_FLOOR_MIB. No GPU: NVML and torch are stand-ins."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml
import pytest

from adapters import gpumem
from adapters.pytorch import PyTorchAdapter
from harness.maxbatch.probes import cuda_context_mib, probe_growth_mib, probe_peak_mib
from harness.records import MonitorResult, TrialOutcome, TrialUnit, WorkerMetrics
from harness.run.executor import LocalExecutor
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter

MIB = 2**20


@pytest.fixture
def fake_nvml() -> Iterator[mock.MagicMock]:
    """``adapters.gpumem.pynvml`` as an autospec of the real module (its exception class kept): two GPUs, this
    process on the second with 900 MiB, someone else's on the first."""
    with mock.patch("adapters.gpumem.pynvml", autospec=True) as m:
        m.NVMLError = pynvml.NVMLError
        m.nvmlDeviceGetCount.return_value = 2
        m.nvmlDeviceGetHandleByIndex.side_effect = lambda i: f"gpu{i}"
        m.nvmlDeviceGetMemoryInfo.side_effect = lambda h: SimpleNamespace(used=(2000 if h == "gpu0" else 900) * MIB)
        m.nvmlDeviceGetComputeRunningProcesses.side_effect = lambda h: (
            [SimpleNamespace(pid=4242, usedGpuMemory=2000 * MIB)] if h == "gpu0"
            else [SimpleNamespace(pid=gpumem.os.getpid(), usedGpuMemory=900 * MIB)])
        yield m


def test_the_context_is_what_this_process_holds_beyond_its_allocator(fake_nvml):
    reading = gpumem.context_mib(allocator_mib=380.0)
    assert reading.mib == 520.0 and "this process's used memory" in reading.source
    assert gpumem.emulated_cap_mib(6144.0, reading) == 6144.0 - 520.0
    assert gpumem.emulated_cap_mib(400.0, reading) == 0.0  # the context alone fills such a card


def test_without_the_process_listed_the_devices_growth_since_before_stands_in(fake_nvml):
    fake_nvml.nvmlDeviceGetComputeRunningProcesses.side_effect = lambda h: []  # another PID namespace
    reading = gpumem.context_mib(allocator_mib=100.0, before_mib=2300.0)
    assert reading.mib == 2900.0 - 2300.0 - 100.0 and "not listed" in reading.source
    assert gpumem.context_mib(allocator_mib=100.0).mib is None  # and with no baseline, nothing is claimed


def test_without_nvml_nothing_is_measured(fake_nvml):
    fake_nvml.nvmlInit.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert gpumem.devices_used_mib() is None and gpumem.process_used_mib() is None
    reading = gpumem.context_mib(allocator_mib=100.0, before_mib=50.0)
    assert reading.mib is None and reading.source.startswith("none")
    assert gpumem.emulated_cap_mib(6144.0, reading) == 6144.0  # the cap as before: nothing to take off


class FakeTorch:
    """The few ``torch`` calls the PyTorch adapter's GPU memory code makes, recorded."""

    def __init__(self, reserved_mib: float, peak_reserved_mib: float = 0.0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.cuda = SimpleNamespace(
            synchronize=lambda: None, memory_reserved=lambda: reserved_mib * MIB,
            empty_cache=lambda: self.calls.append(("empty_cache", None)),
            set_per_process_memory_fraction=lambda f, d: self.calls.append(("fraction", f)),
            max_memory_allocated=lambda: 300 * MIB, max_memory_reserved=lambda: peak_reserved_mib * MIB)

    def zeros(self, *shape: int, device: Any) -> None:
        self.calls.append(("zeros", device))


def _adapter(torch: FakeTorch) -> PyTorchAdapter:
    adapter = PyTorchAdapter()
    adapter.torch, adapter.cuda, adapter.device = torch, True, "cuda:0"
    return adapter


def test_the_emulated_card_caps_the_allocator_at_the_card_less_the_context(fake_nvml):
    torch = FakeTorch(reserved_mib=2.0)  # the block the context-making tensor took
    info = _adapter(torch)._cap_memory(6144.0, 81559.0, before_mib=None)
    context = 900.0 - 2.0
    assert info["cuda_context_setup_mib"] == context and info["memory_cap_mib"] == 6144.0 - context
    assert ("fraction", (6144.0 - context) / 81559.0) in torch.calls
    assert torch.calls[0] == ("zeros", "cuda:0") and ("empty_cache", None) in torch.calls


def test_memory_stats_report_what_the_worker_holds_outside_the_allocator(fake_nvml):
    stats = _adapter(FakeTorch(reserved_mib=400.0, peak_reserved_mib=480.0)).memory_stats()
    assert (stats.peak_mib, stats.reserved_mib, stats.context_mib) == (300.0, 480.0, 500.0)


def _ok(metrics: WorkerMetrics, monitor: dict[str, float] | None = None) -> TrialOutcome:
    return TrialOutcome(trial=make_trial(), status="ok", metrics=metrics,
                        monitor=MonitorResult(aggregates=dict(monitor or {})))


def test_the_search_counts_the_context_in_a_gpu_peak():
    m = WorkerMetrics(framework_reserved_mib=5600.0, framework_peak_mib=5100.0, cuda_context_mib=510.0)
    assert probe_peak_mib(_ok(m), "gpu-emulated") == 6110.0  # what a card of the budget's size would hold
    assert probe_growth_mib(_ok(m), "gpu-emulated") == 5100.0  # what grows with the batch has no context in it
    # the sampler's NVML figure for the worker counts the context already: nothing added
    assert probe_peak_mib(_ok(WorkerMetrics(cuda_context_mib=510.0), {"proc_gpu_mem_peak_mib": 6000.0}),
                          "gpu-card") == 6000.0
    assert probe_peak_mib(_ok(WorkerMetrics(framework_reserved_mib=5600.0)), "gpu-card") == 5600.0  # not measured
    outcomes = [_ok(m), _ok(WorkerMetrics(cuda_context_mib=530.0)), _ok(WorkerMetrics())]
    assert cuda_context_mib(outcomes) == 530.0 and cuda_context_mib([_ok(WorkerMetrics())]) is None


@pytest.mark.process
def test_the_worker_reports_the_context_its_adapter_measured(tiny_data, tmp_path):
    trial = make_trial(adapter_options={"behaviour": "gpu_stats"})
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target="tests.fakes.adapter:FakeAdapter", oom_patterns=FakeAdapter.oom_stderr_patterns)
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "ok", outcome.reason
    assert outcome.metrics is not None and outcome.metrics.cuda_context_mib == 512.0
    assert outcome.metrics.framework_reserved_mib == 150.0


# ---- TensorFlow and JAX cap their allocator before their context exists: an earlier probe's context is taken off


class _RecordingCard:
    """A stand-in executor for a search on an emulated card: each probe's worker held ``context_mib`` outside its
    allocator; records the context hint each probe was started with."""

    def __init__(self, context_mib: float | None) -> None:
        self.context_mib, self.hints = context_mib, []

    def run(self, unit: TrialUnit, on_event: Any = None) -> TrialOutcome:
        self.hints.append(unit.trial.context_hint_mib)
        return TrialOutcome(trial=unit.trial, status="ok", metrics=WorkerMetrics(cuda_context_mib=self.context_mib))


@pytest.mark.parametrize(("kind", "device", "expected"), [("gpu-emulated", "gpu", [0.0, 510.0, 510.0]),
                                                          ("gpu-card", "gpu", [0.0, 0.0, 0.0]),
                                                          ("cpu-rlimit-data", "cpu", [0.0, 0.0, 0.0])])
def test_each_probe_on_an_emulated_card_carries_the_context_earlier_probes_measured(
        tiny_data: Any, monkeypatch: pytest.MonkeyPatch, kind: str, device: str, expected: list[float]) -> None:
    from harness.maxbatch.budget import Budget
    from harness.maxbatch.probes import WorkerProber
    from harness.maxbatch.request import MaxBatchRequest
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)
    req = MaxBatchRequest(framework="fake", model="tiny_cnn", device=device, synthetic_shape=(1, 8, 8))  # type: ignore[arg-type]
    card = _RecordingCard(510.0)
    prober = WorkerProber(req, Budget(6144.0, kind, device, None, 6144.0 if kind == "gpu-emulated" else 0.0),
                          tiny_data, card)  # type: ignore[arg-type]
    for batch in (1, 16, 64):
        prober(batch, False)
    assert card.hints == expected
    # the hint makes the card what a real one would hold: it never changes which trial a probe is
    assert make_trial(context_hint_mib=510.0).trial_hash == make_trial().trial_hash


class _FakeTF:
    """The ``tf.config`` calls the TensorFlow adapter's cap makes, and the memory statistics it reads."""

    def __init__(self) -> None:
        self.limits: list[int] = []
        self.config = SimpleNamespace(
            LogicalDeviceConfiguration=lambda memory_limit: memory_limit,
            set_logical_device_configuration=lambda gpu, configs: self.limits.extend(configs),
            experimental=SimpleNamespace(get_memory_info=lambda dev: {"peak": 300 * MIB, "current": 0}))
        self.test = SimpleNamespace(experimental=SimpleNamespace(sync_devices=lambda: None))


def test_tensorflow_caps_its_logical_device_at_the_card_less_an_earlier_probes_context(fake_nvml):
    from adapters.tensorflow import TensorFlowAdapter

    tf, adapter = _FakeTF(), TensorFlowAdapter()
    info = adapter._cap_memory(tf, "GPU:0", 1000.0, 520.0)
    assert tf.limits == [480] and info["memory_cap_mib"] == 480.0 and info["cuda_context_setup_mib"] == 520.0
    adapter.tf, adapter.gpu = tf, True
    stats = adapter.memory_stats()  # the process holds 900 MiB (fake NVML): its pool is the whole 480 MiB cap
    assert (stats.peak_mib, stats.context_mib) == (300.0, 420.0)
    first = TensorFlowAdapter()._cap_memory(tf, "GPU:0", 1000.0, None)  # the search's first probe: nothing known
    assert tf.limits[-1] == 1000 and first["cuda_context_setup_mib"] is None
    assert "first probe" in first["cuda_context_source"]
