"""JAX on a GPU without a GPU (issue 31, item 3): the memory-fraction variable, the whole-card budget, the GPU the
worker sees and the CUDA extra named, each against stand-ins for NVML, package metadata and JAX itself.

JAX is never imported here: ``fake_jax`` is a module that records the environment at the moment its GPU backend
would start (what XLA reads), so the worker's environment is read exactly where jaxlib reads it.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

from adapters.base import RuntimeConfig
from adapters.jax import JAXAdapter
from adapters.jax import gpu as jax_gpu
from adapters.jax.gpu import NEW_FRACTION_VAR, OLD_FRACTION_VAR, VisibleGPU
from harness.errors import ConfigError

MIB = 1024 * 1024


@pytest.mark.parametrize(("version", "name"), [("0.11.2", NEW_FRACTION_VAR), ("0.6.0", NEW_FRACTION_VAR),
                                               ("0.7.1", NEW_FRACTION_VAR), ("0.5.3", OLD_FRACTION_VAR),
                                               ("0.4.30", OLD_FRACTION_VAR), (None, OLD_FRACTION_VAR),
                                               ("0.6.0.dev20250301", NEW_FRACTION_VAR)])
def test_the_fraction_variable_follows_the_installed_jaxlib(version, name):
    assert jax_gpu.fraction_variable(version) == name


def test_both_fractions_of_the_user_leave_one_the_jaxlib_reads():
    env = {NEW_FRACTION_VAR: "0.5", OLD_FRACTION_VAR: "0.6"}
    info = jax_gpu.settle_fraction_variables("0.11.2", env)
    assert env == {NEW_FRACTION_VAR: "0.5"}, env
    assert info["memory_fraction_env_dropped"] == f"{OLD_FRACTION_VAR}=0.6"
    env = {OLD_FRACTION_VAR: "0.6"}  # the user's old name alone, on a new jaxlib: kept, under the new name
    jax_gpu.settle_fraction_variables("0.11.2", env)
    assert env == {NEW_FRACTION_VAR: "0.6"}, env
    env = {NEW_FRACTION_VAR: "0.5"}  # an old jaxlib would not read the new name
    jax_gpu.settle_fraction_variables("0.4.30", env)
    assert env == {OLD_FRACTION_VAR: "0.5"}, env


def test_the_trials_fraction_replaces_the_users_and_says_so():
    env = {NEW_FRACTION_VAR: "0.5", OLD_FRACTION_VAR: "0.6", "OTHER": "x"}
    info = jax_gpu.settle_fraction_variables("0.11.2", env, fraction=0.25)
    assert env == {NEW_FRACTION_VAR: "0.2500", "OTHER": "x"}, env
    assert "XLA_CLIENT_MEM_FRACTION=0.5" in info["memory_fraction_env_dropped"], info


class FakeNvml:
    """NVML with GPUs whose NVML order is not their PCI bus order."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[dict[str, Any]], init_fails: bool = False) -> None:
        self.gpus, self.init_fails = gpus, init_fails

    def nvmlInit(self):
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return next(g for g in self.gpus if g["uuid"] == uuid)

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=h["total"] * MIB, free=h["free"] * MIB)

    def nvmlDeviceGetName(self, h):
        return h["name"]


GPUS = [  # NVML's GPU 0 is the one on the higher bus: CUDA (PCI_BUS_ID order) calls it device 1
    {"bus": "0000:81:00.0", "total": 81559, "free": 81000, "name": "H100", "uuid": "GPU-b"},
    {"bus": "0000:01:00.0", "total": 24576, "free": 24000, "name": "L4", "uuid": "GPU-a"},
]


def test_the_gpu_is_the_one_the_worker_sees_not_nvml_gpu_0():
    nvml = FakeNvml(GPUS)
    assert jax_gpu.visible_gpu({}, nvml).total_mib == 24576  # CUDA device 0: the lowest bus id
    assert jax_gpu.visible_gpu({"CUDA_VISIBLE_DEVICES": "1"}, nvml).total_mib == 81559
    assert jax_gpu.visible_gpu({"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, nvml).total_mib == 24576
    assert jax_gpu.visible_gpu({"CUDA_VISIBLE_DEVICES": ""}, nvml) is None
    assert jax_gpu.visible_gpu({"CUDA_VISIBLE_DEVICES": "2"}, nvml) is None
    assert jax_gpu.visible_gpu({}, FakeNvml(GPUS, init_fails=True)) is None


def test_a_whole_card_is_the_whole_card_and_a_preallocated_one_says_what_it_got():
    gpu = VisibleGPU(label="CUDA device 0 (H100)", total_mib=80000.0, free_mib=79000.0)
    assert jax_gpu.whole_card_fraction(gpu, preallocate=False)[0] == 1.0  # not XLA's default 0.75
    fraction, said = jax_gpu.whole_card_fraction(gpu, preallocate=True)
    assert fraction == pytest.approx((79000 - jax_gpu.PREALLOCATE_HEADROOM_MIB) / 80000)
    assert "77976 MiB preallocated" in said and "79000 MiB" in said, said


def test_the_cuda_extra_follows_the_driver_then_the_installed_wheels():
    assert jax_gpu.cuda_extra(lambda: 13)[0] == "jax[cuda13]"
    assert jax_gpu.cuda_extra(lambda: 12)[0] == "jax[cuda12]"
    assert jax_gpu.cuda_extra(lambda: None, lambda: ["nvidia-cublas-cu13", "numpy"])[0] == "jax[cuda13]"
    assert jax_gpu.cuda_extra(lambda: None, lambda: ["nvidia-cudnn-cu12"])[0] == "jax[cuda12]"


# ---- setup() against a stand-in JAX: the environment its GPU backend starts with --------------------------


class FakeDevice:
    platform = "gpu"
    device_kind = "NVIDIA H100 80GB HBM3"

    def memory_stats(self):
        return {"bytes_limit": 80000 * MIB}


def fake_jax(seen: dict[str, Any], gpu_error: str | None = None) -> types.ModuleType:
    """A ``jax`` whose ``devices('gpu')`` records the fraction variables as XLA would read them, then behaves as
    jaxlib 0.11 does: raises where both are set, or where ``gpu_error`` says the backend failed."""
    mod = types.ModuleType("jax")

    class Config:  # jax.config: update() recorded; a setting reads back what was set, else None (JAX's default)
        def update(self, key: str, value: Any) -> None:
            seen.setdefault("config", {})[key] = value

        def __getattr__(self, key: str) -> Any:
            return seen.get("config", {}).get(key)

    mod.config = Config()

    def devices(kind: str = "gpu"):
        seen["env"] = {k: os.environ[k] for k in (NEW_FRACTION_VAR, OLD_FRACTION_VAR, "XLA_PYTHON_CLIENT_PREALLOCATE")
                       if k in os.environ}
        if NEW_FRACTION_VAR in os.environ and OLD_FRACTION_VAR in os.environ:
            raise RuntimeError("Unable to initialize backend 'cuda': XLA_CLIENT_MEM_FRACTION is specified together "
                               "with XLA_PYTHON_CLIENT_MEM_FRACTION. Remove the latter one, it is deprecated.")
        if gpu_error:
            raise RuntimeError(gpu_error)
        return [FakeDevice()]

    mod.devices = devices
    return mod


@pytest.fixture
def gpu_worker(monkeypatch):
    """A worker process's environment with the user's two fraction variables, a visible 80,000 MiB GPU, jaxlib 0.11."""
    for name in (NEW_FRACTION_VAR, OLD_FRACTION_VAR, "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.setenv(name, "0.5")  # restored after the test, whatever setup() left
    monkeypatch.setattr(jax_gpu, "visible_gpu", lambda env: VisibleGPU("CUDA device 0 (H100)", 80000.0, 79500.0))
    monkeypatch.setattr(jax_gpu, "installed_version", lambda dist: "0.11.2" if dist == "jaxlib" else None)
    seen: dict[str, Any] = {}

    def start(gpu_error: str | None = None, **runtime: Any) -> dict[str, Any]:
        monkeypatch.setitem(sys.modules, "jax", fake_jax(seen, gpu_error))
        seen["info"] = JAXAdapter().setup(RuntimeConfig(device="gpu", **runtime)).to_dict()
        return seen

    return start


def test_both_variables_set_by_the_user_never_break_the_worker(gpu_worker):
    seen = gpu_worker()
    assert seen["env"] == {NEW_FRACTION_VAR: "1.0000", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, seen
    assert seen["config"] == {"jax_platforms": "cuda"}, seen  # no silent fall back to the CPU
    assert seen["info"]["memory_fraction"] == 1.0 and "the whole card" in seen["info"]["memory_budget"]
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.5" in seen["info"]["memory_fraction_env_dropped"]


def test_a_memory_limit_is_a_fraction_of_the_visible_card(gpu_worker):
    seen = gpu_worker(memory_limit_mib=20000)
    assert seen["env"] == {NEW_FRACTION_VAR: "0.2500", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, seen
    assert seen["info"]["memory_limit_mib"] == 20000 and seen["info"]["memory_mode"] == "limit:20000"


def test_a_backend_that_does_not_start_is_refused_with_its_cause_and_the_right_extra(gpu_worker, monkeypatch):
    monkeypatch.setattr(jax_gpu, "cuda_extra", lambda: ("jax[cuda13]", "the driver supports CUDA 13"))
    with pytest.raises(ConfigError) as err:
        gpu_worker(gpu_error="Unable to initialize backend 'cuda': no CUDA plugin")
    text = str(err.value)
    assert "Unable to initialize backend 'cuda': no CUDA plugin" in text, text
    assert "pip install 'jax[cuda13]' (the driver supports CUDA 13)" in text and "cuda12" not in text, text


def test_a_memory_limit_leaves_out_the_context_an_earlier_probe_measured(gpu_worker):
    seen = gpu_worker(memory_limit_mib=20000, context_hint_mib=400.0)
    assert seen["env"] == {NEW_FRACTION_VAR: "0.2450", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, seen
    info = seen["info"]
    assert info["memory_cap_mib"] == 19600.0 and info["cuda_context_setup_mib"] == 400.0, info
    assert info["memory_limit_mib"] == 20000 and "less 400 MiB of CUDA context" in info["memory_budget"], info
