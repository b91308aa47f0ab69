"""The NVML probe and its error mapping, against a patched ``pynvml`` (autospec, real constants): no GPU."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from types import SimpleNamespace
from unittest import mock

import pynvml
import pytest

from harness.config.experiment import parse_experiment
from harness.errors import PartialReadingError, ProbeError, ProbeUnsupportedError, WorkerGoneError
from harness.monitor import environment, nvml, sampler
from harness.monitor.sampler import Sampler, SamplerFactory, monitor_factory_for
from harness.records import TrialOutcome, TrialUnit
from harness.store import Store
from tests.conftest import make_trial
from tests.fakes.monitor import FakeClock, FixedTree

HANDLE = object()
MIB = 2**20


def _err(name: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, name))


@pytest.fixture
def fake_nvml() -> Iterator[mock.MagicMock]:
    """``harness.monitor.nvml.pynvml`` patched with an autospec of the real module (signatures checked), its real
    constants and exception classes restored, and a healthy GPU's answers."""
    with mock.patch("harness.monitor.nvml.pynvml", autospec=True) as m:
        for name in dir(pynvml):
            value = getattr(pynvml, name)
            if name.startswith("NVML") and (isinstance(value, int) or
                                            (isinstance(value, type) and issubclass(value, Exception))):
                setattr(m, name, value)
        m.nvmlMemory_v2 = pynvml.nvmlMemory_v2
        m.nvmlDeviceGetUtilizationRates.return_value = SimpleNamespace(gpu=87, memory=41)
        m.nvmlDeviceGetMemoryInfo.return_value = SimpleNamespace(used=3000 * MIB, total=16384 * MIB)
        m.nvmlDeviceGetComputeRunningProcesses.return_value = [
            SimpleNamespace(pid=100, usedGpuMemory=1000 * MIB),
            SimpleNamespace(pid=101, usedGpuMemory=500 * MIB),
            SimpleNamespace(pid=999, usedGpuMemory=1200 * MIB)]  # someone else's process
        m.nvmlDeviceGetPowerUsage.return_value = 212_500  # mW
        m.nvmlDeviceGetTotalEnergyConsumption.return_value = 123_456_789  # mJ
        m.nvmlDeviceGetClockInfo.return_value = 1755
        m.nvmlDeviceGetTemperature.return_value = 66
        m.nvmlDeviceGetName.return_value = b"Tesla V100-SXM2-16GB"
        m.nvmlDeviceGetUUID.return_value = "GPU-5e1f"
        m.nvmlDeviceGetPciInfo.return_value = SimpleNamespace(busId=b"00000000:1B:00.0")
        m.nvmlDeviceGetCount.return_value = 2
        m.nvmlDeviceGetHandleByIndex.return_value = HANDLE
        m.nvmlSystemGetDriverVersion.return_value = "550.54"
        m.nvmlSystemGetCudaDriverVersion_v2.return_value = 12040
        sampler.gpu_probe_factory.cache_clear()  # forget what the real (GPU-less) machine gave
        yield m
    nvml.shutdown()
    sampler.gpu_probe_factory.cache_clear()


def test_a_healthy_gpu_reads_every_field_in_its_unit(fake_nvml):
    probe = nvml.NvmlProbe(HANDLE)
    values = probe.read(frozenset({100, 101}))
    assert values == {"gpu_util_pct": 87.0, "gpu_mem_util_pct": 41.0, "gpu_mem_used_mib": 3000.0,
                      "gpu_mem_total_mib": 16384.0, "proc_gpu_mem_mib": 1500.0, "power_w": 212.5,
                      "energy_mj": 123_456_789, "sm_clock_mhz": 1755.0, "temperature_c": 66.0}
    fake_nvml.nvmlDeviceGetMemoryInfo.assert_called_with(HANDLE, version=pynvml.nvmlMemory_v2)
    fake_nvml.nvmlDeviceGetClockInfo.assert_called_with(HANDLE, pynvml.NVML_CLOCK_SM)
    fake_nvml.nvmlDeviceGetTemperature.assert_called_with(HANDLE, pynvml.NVML_TEMPERATURE_GPU)
    assert probe.unsupported == {}


def test_a_worker_nvml_lists_no_process_of_has_unknown_process_memory_with_a_note_not_zero(fake_nvml):
    """In a container NVML may list the host's PIDs, which match none of the worker's: unknown, not 0."""
    probe = nvml.NvmlProbe(HANDLE)
    assert math.isnan(probe.read(frozenset({4242}))["proc_gpu_mem_mib"])
    assert "listed no process of the worker" in probe.unsupported[nvml.NO_PID_KEY]
    assert probe.read(frozenset({100}))["proc_gpu_mem_mib"] == 1000.0  # its CUDA context is made: found
    assert nvml.NO_PID_KEY not in probe.unsupported
    assert math.isnan(probe.read(frozenset({4242}))["proc_gpu_mem_mib"])  # gone again: unknown, no note
    assert nvml.NO_PID_KEY not in probe.unsupported


def test_a_trial_whose_worker_nvml_never_lists_stores_null_process_memory_and_says_why(fake_nvml):
    clock = FakeClock(0.0)
    class Tree(FixedTree):
        n = 0

        def refresh(self):
            Tree.n += 1
            if Tree.n > 5:
                raise WorkerGoneError("worker 4242 exited")
            return self.pids

    sampler = Sampler([nvml.NvmlProbe(HANDLE, "GPU 0 (Tesla V100-SXM2-16GB, GPU-5e1f)")], clock=clock,
                      wait=clock.wait, tree_factory=Tree)
    sampler.start(4242)
    sampler.phase("setup", 0.0)
    sampler._thread.join(timeout=10)
    agg = sampler.stop().aggregates
    assert agg["proc_gpu_mem_peak_mib"] is None and agg["gpu_mem_used_peak_mib"] == 3000.0
    assert "listed no process of the worker" in agg["readings_note"]
    assert agg["gpu_used"] == "GPU 0 (Tesla V100-SXM2-16GB, GPU-5e1f)"


def test_cuda_indices_follow_the_pci_bus_order_not_nvmls_and_workers_get_that_order(fake_nvml):
    """NVML index 0 sits on bus 0x41, index 1 on bus 0x1B: CUDA (PCI_BUS_ID order) calls the second one 0."""
    from harness.run.executor import WORKER_CUDA_DEVICE_ORDER

    handles = {0: "h0", 1: "h1"}
    fake_nvml.nvmlDeviceGetHandleByIndex.side_effect = lambda i: handles[i]
    fake_nvml.nvmlDeviceGetPciInfo.side_effect = lambda h: SimpleNamespace(
        busId={"h0": b"00000000:41:00.0", "h1": b"00000000:1B:00.0"}[h])
    fake_nvml.nvmlDeviceGetUUID.side_effect = lambda h: {"h0": "GPU-aaaa", "h1": "GPU-bbbb"}[h]
    assert nvml.cuda_index_handle(0) == ("h1", 1) and nvml.cuda_index_handle(1) == ("h0", 0)
    handle, label = nvml.worker_device({"CUDA_VISIBLE_DEVICES": "0"})
    assert handle == "h1" and label == "GPU 0 (NVML index 1) (Tesla V100-SXM2-16GB, GPU-bbbb)"
    with pytest.raises(ProbeError, match="CUDA device 2 does not exist"):
        nvml.cuda_index_handle(2)
    assert WORKER_CUDA_DEVICE_ORDER == nvml.CUDA_DEVICE_ORDER == "PCI_BUS_ID"


def test_not_supported_is_nan_with_the_reason_and_never_asked_again(fake_nvml):
    fake_nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = _err("NVML_ERROR_NOT_SUPPORTED")  # pre-Volta
    probe = nvml.NvmlProbe(HANDLE)
    for _ in range(3):
        values = probe.read(frozenset({100}))
        assert math.isnan(values["energy_mj"])
        assert values["power_w"] == 212.5  # the rest of the sample is intact, and no gap is raised
    assert "Not Supported" in probe.unsupported["energy"]
    assert fake_nvml.nvmlDeviceGetTotalEnergyConsumption.call_count == 1


def test_old_driver_without_memory_v2_falls_back_to_v1_and_says_so(fake_nvml):
    v1 = SimpleNamespace(used=3500 * MIB, total=16384 * MIB)

    def memory_info(handle, version=None):
        if version:
            raise _err("NVML_ERROR_FUNCTION_NOT_FOUND")
        return v1

    fake_nvml.nvmlDeviceGetMemoryInfo.side_effect = memory_info
    probe = nvml.NvmlProbe(HANDLE)
    assert probe.read(frozenset())["gpu_mem_used_mib"] == 3500.0
    assert probe.read(frozenset())["gpu_mem_used_mib"] == 3500.0
    assert "v1" in probe.unsupported["memory_v2"]


def test_gpu_lost_mid_run_is_a_gap_with_the_reason_then_recovers(fake_nvml):
    fake_nvml.nvmlDeviceGetUtilizationRates.side_effect = [
        SimpleNamespace(gpu=50, memory=10), _err("NVML_ERROR_GPU_IS_LOST"),
        SimpleNamespace(gpu=70, memory=20)]
    probe = nvml.NvmlProbe(HANDLE)
    assert probe.read(frozenset())["gpu_util_pct"] == 50.0
    with pytest.raises(PartialReadingError) as info:
        probe.read(frozenset())
    assert "GPU is lost" in str(info.value) and "nvmlDeviceGetUtilizationRates" not in str(info.value)
    assert "utilization" in str(info.value)
    assert math.isnan(info.value.values["gpu_util_pct"]) and info.value.values["power_w"] == 212.5
    assert probe.read(frozenset())["gpu_util_pct"] == 70.0  # a transient error does not switch it off


def test_error_mapping_is_the_one_place(fake_nvml):
    @nvml.nvml_errors
    def call(code_name):
        raise _err(code_name)

    for name in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NO_PERMISSION"):
        with pytest.raises(ProbeUnsupportedError):
            call(name)
    for name in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_UNKNOWN",
                 "NVML_ERROR_TIMEOUT"):
        with pytest.raises(ProbeError) as info:
            call(name)
        assert not isinstance(info.value, ProbeUnsupportedError)
        assert isinstance(info.value.__cause__, pynvml.NVMLError)  # chained


def test_processes_without_per_process_memory_are_nan_not_zero(fake_nvml):
    procs = [SimpleNamespace(pid=100, usedGpuMemory=None)]
    fake_nvml.nvmlDeviceGetComputeRunningProcesses.return_value = procs
    probe = nvml.NvmlProbe(HANDLE)
    assert math.isnan(probe.read(frozenset({100}))["proc_gpu_mem_mib"])
    assert "per-process" in probe.unsupported["processes"]


def test_worker_device_follows_cuda_visible_devices(fake_nvml):
    handle, label = nvml.worker_device({})
    assert handle is HANDLE and label == "GPU 0 (Tesla V100-SXM2-16GB, GPU-5e1f)"
    assert nvml.worker_device({"CUDA_VISIBLE_DEVICES": "1,0"})[1].startswith("GPU 1 (")  # the first visible one
    nvml.worker_device({"CUDA_VISIBLE_DEVICES": "GPU-8e7a-uuid"})
    fake_nvml.nvmlDeviceGetHandleByUUID.assert_called_with("GPU-8e7a-uuid")
    assert nvml.worker_device({"CUDA_VISIBLE_DEVICES": ""}) is None
    with pytest.raises(ProbeError, match="cannot tell which GPU"):
        nvml.worker_device({"CUDA_VISIBLE_DEVICES": "banana"})


def test_nvml_is_initialised_once_per_process(fake_nvml):
    nvml.shutdown()
    nvml.ensure_initialised()
    nvml.ensure_initialised()
    assert fake_nvml.nvmlInit.call_count == 1
    nvml.shutdown()
    fake_nvml.nvmlShutdown.assert_called_once_with()


def test_environment_lists_gpus_through_the_probe_module(fake_nvml):
    gpus, note = environment.gpus()
    assert [g["name"] for g in gpus] == ["Tesla V100-SXM2-16GB"] * 2
    assert gpus[0]["memory_total_mib"] == 16384.0 and gpus[0]["cuda_driver"] == "12.4"
    assert note.startswith("2 GPU(s)")


def test_environment_without_a_driver_says_no_gpu(fake_nvml):
    nvml.shutdown()
    fake_nvml.nvmlInit.side_effect = _err("NVML_ERROR_LIBRARY_NOT_FOUND")
    gpus, note = environment.gpus()
    assert gpus == []
    assert note.startswith("no GPU: running on CPU") and "Library Not Found" in note


def test_gpu_trial_through_sampler_and_store_with_a_lost_gpu_mid_run(fake_nvml, tmp_path):
    """The GPU path end to end without a GPU: patched NVML -> sampler -> trial row and samples table."""

    energy = iter(range(10**9, 10**9 + 100 * 20_000, 20_000))  # 20 J per 0.1 s tick = 200 W
    fake_nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: next(energy)
    utils = [SimpleNamespace(gpu=90, memory=30)] * 100
    utils[12] = _err("NVML_ERROR_GPU_IS_LOST")
    fake_nvml.nvmlDeviceGetUtilizationRates.side_effect = utils
    clock = FakeClock(0.0)

    class Tree(FixedTree):
        n = 0

        def refresh(self):
            Tree.n += 1
            if Tree.n > 30:
                raise WorkerGoneError("worker 100 exited")
            return frozenset({100, 101})

    sampler = Sampler([nvml.NvmlProbe(HANDLE, "GPU 0")], clock=clock, wait=clock.wait, tree_factory=Tree)
    sampler.start(100)
    for name, t in (("setup", 0.0), ("warmup", 0.45), ("timed", 0.95), ("eval", 2.05)):
        sampler.phase(name, t)
    sampler._thread.join(timeout=10)
    mon = sampler.stop()
    trial = make_trial(batch_size=32, timed_steps=8)
    outcome = TrialOutcome(trial=trial, status="ok", phase_steps={"warmup": 1, "timed": 8, "train": 0},
                           monitor=mon)
    with Store.open(tmp_path) as store:
        store.write_trial(outcome, run_id=1, env={})
        row = store.trials()[0]
        samples = [dict(r) for r in store.conn.execute("SELECT * FROM samples ORDER BY t_s")]
    assert row["gpu_util_pct"] == pytest.approx(90.0)  # the gap at 1.2 s weighs nothing
    # the counter's 20 J per 0.1 s, not the power reading's 212.5 W (a 1 s trailing mean on recent GPUs)
    assert row["power_w"] == pytest.approx(200.0)
    assert row["energy_j"] == pytest.approx(200.0 * 1.1)  # counter over the 1.1 s timed phase
    assert row["j_per_sample"] == pytest.approx(220.0 / (32 * 8))
    assert row["proc_gpu_mem_peak_mib"] == 1500.0 and row["gpu_mem_used_peak_mib"] == 3000.0
    assert row["samples_n"] == 30 and row["timed_samples_n"] == 11 and row["readings_note"] is None
    lost = [s for s in samples if s["gap_reason"]]
    assert len(lost) == 1 and lost[0]["phase"] == "timed"
    assert lost[0]["gap_reason"] == "nvml: NVML utilization: GPU is lost"
    assert lost[0]["gpu_util_pct"] is None and lost[0]["power_w"] == 212.5
    assert json.loads(row["monitor_json"])["phases"]["timed"]["energy_method"] == "counter"


@pytest.mark.gpu
def test_real_gpu_gives_readings_in_range():
    nvml.ensure_initialised()
    picked = nvml.worker_device()
    assert picked is not None
    probe = nvml.NvmlProbe(*picked)
    values = probe.read(frozenset())
    assert 0 <= values["gpu_util_pct"] <= 100
    # an idle card may read 0 MiB used (NVML's v2 counter on an idle H100: issue 29): no test assumes a non-zero
    # idle reading
    assert 0 <= values["gpu_mem_used_mib"] <= values["gpu_mem_total_mib"] and values["gpu_mem_total_mib"] > 0
    # this test process holds no GPU memory, so NVML lists none of its PIDs: unknown, with the note (issue 29)
    assert math.isnan(values["proc_gpu_mem_mib"]) and nvml.NO_PID_KEY in probe.unsupported
    assert math.isnan(values["energy_mj"]) == ("energy" in probe.unsupported)


def test_factory_samples_the_gpu_the_worker_will_see_and_travels_by_pickle(fake_nvml, tiny_data):
    import pickle

    exp = parse_experiment({"name": "g", "frameworks": ["pytorch"], "batch_sizes": [2], "device": "gpu"})
    factory, notice = monitor_factory_for(exp)
    assert notice.startswith("GPU sampled: GPU 0 (Tesla V100-SXM2-16GB, GPU-5e1f) through NVML. NVML averages")
    factory = pickle.loads(pickle.dumps(factory))  # e.g. to a Ray node; NVML handles are made there
    assert isinstance(factory, SamplerFactory)
    unit = TrialUnit(trial=make_trial(device="gpu"), data=tiny_data, order_path="", adapter_target="x:Y",
                     env={"CUDA_VISIBLE_DEVICES": "1"})
    made = factory(unit)
    fake_nvml.nvmlDeviceGetHandleByIndex.assert_called_with(1)
    assert isinstance(made.probes[1], nvml.NvmlProbe) and made.probes[1].label.startswith("GPU 1")
    factory(unit)
    assert fake_nvml.nvmlInit.call_count == 1  # once per process, not per trial
    cpu_unit = TrialUnit(trial=make_trial(device="cpu"), data=tiny_data, order_path="", adapter_target="x:Y")
    cpu = factory(cpu_unit)
    assert cpu.probes[1].fields == ()  # the null probe: a CPU trial leaves the GPU alone
    # device = "auto" resolved per framework (issue 29): a CPU-only build's trial beside a GPU reads no GPU (its
    # columns NULL, not an idle card's 0 %), a CUDA build's trial reads it
    resolved = {d: factory(TrialUnit(trial=make_trial(device="auto", device_resolved=d), data=tiny_data,
                                     order_path="", adapter_target="x:Y")).probes[1] for d in ("cpu", "gpu")}
    assert resolved["cpu"].fields == () and isinstance(resolved["gpu"], nvml.NvmlProbe)
