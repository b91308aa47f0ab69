"""The GPU math mode (issue 29): refused in the parent where it would not be applied, applied and read back by each
built-in adapter (with stand-ins for the frameworks' switches: no GPU and no framework here), checked in the worker."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from adapters import mathmode
from adapters.base import Adapter, capabilities
from adapters.jax import mathmode as jax_mm
from adapters.mxnet import mathmode as mxnet_mm
from adapters.pytorch import mathmode as pytorch_mm
from adapters.tensorflow import mathmode as tensorflow_mm
from harness.config.experiment import parse_experiment
from harness.config.precision import check_math_mode, gpu_math_mode, validate_math_mode
from harness.errors import ConfigError
from harness.registry import adapter_class, adapter_target
from tests import ROOT
from tests.helpers.envs import python_for

BUILTINS = ("pytorch", "tensorflow", "jax", "mxnet")


# ------------------------------------------------------------------------------------ refused in the parent
@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_tf32_off_a_gpu_is_refused_for_every_framework(device):
    for fw in BUILTINS:
        cls = adapter_class(fw)
        with pytest.raises(ConfigError, match="math_mode = 'tf32'.*would not be applied") as e:
            validate_math_mode("tf32", device, fw, cls.math_modes, cls.math_mode_note)
        assert "device = 'gpu'" in str(e.value)  # and the fix


def test_what_each_builtin_applies_on_a_gpu_and_mxnet_says_why_not_tf32():
    for fw in BUILTINS:
        cls = adapter_class(fw)
        assert "math_modes" in capabilities(cls)
        validate_math_mode("ieee", "gpu", fw, cls.math_modes, cls.math_mode_note)
        validate_math_mode("framework-default", "gpu", fw, cls.math_modes, cls.math_mode_note)
        if fw != "mxnet":
            validate_math_mode("tf32", "gpu", fw, cls.math_modes, cls.math_mode_note)
    mx = adapter_class("mxnet")
    with pytest.raises(ConfigError, match="not applied by the mxnet adapter on a GPU.*no switch that turns TF32 on"):
        validate_math_mode("tf32", "gpu", "mxnet", mx.math_modes, mx.math_mode_note)


class _Plugin(Adapter):  # a plugin written before math modes: declares none
    name = "oldplugin"
    distributions = ("numpy",)
    import_name = "numpy"


def test_a_plugin_without_the_capability_runs_framework_default_and_on_the_cpu():
    assert "math_modes" not in capabilities(_Plugin)
    validate_math_mode("framework-default", "gpu", "oldplugin", _Plugin.math_modes)
    validate_math_mode("ieee", "cpu", "oldplugin", _Plugin.math_modes)  # the CPU computes float32 as float32
    validate_math_mode("ieee", "auto", "oldplugin", _Plugin.math_modes)  # the worker decides where it landed
    with pytest.raises(ConfigError, match="declares no math modes.*'framework-default'"):
        validate_math_mode("ieee", "gpu", "oldplugin", _Plugin.math_modes)


def test_the_experiment_key_is_refused_with_its_name_and_the_default_is_ieee():
    base = {"name": "x", "frameworks": ["pytorch"], "batch_sizes": [4]}
    assert parse_experiment(base).math_mode == "ieee"
    assert parse_experiment({**base, "device": "gpu", "math_mode": "tf32"}).math_mode == "tf32"
    with pytest.raises(ConfigError, match="math_mode: math_mode = 'tf32'"):
        parse_experiment({**base, "device": "cpu", "math_mode": "tf32"})
    with pytest.raises(ConfigError, match="math_mode: 'tf16' is not one of ieee, tf32, framework-default"):
        parse_experiment({**base, "math_mode": "tf16"})
    with pytest.raises(ConfigError, match="math_mode"):
        parse_experiment({**base, "frameworks": ["mxnet"], "device": "gpu", "math_mode": "tf32"})
    # a variant may set it: ieee and tf32 side by side, two series
    exp = parse_experiment({**base, "device": "gpu", "variants": {"a": {"math_mode": "tf32"}, "b": {}}})
    assert [v.math_mode for _, v in exp.resolved_variants()] == ["tf32", "ieee"]


# ------------------------------------------------------------------------------------ checked in the worker
def test_the_worker_records_what_the_framework_read_back_and_refuses_what_was_not_applied():
    assert check_math_mode("ieee", "jax", "n/a", on_gpu=False) == "n/a"
    assert check_math_mode("ieee", "jax", None, on_gpu=False) == "n/a"  # a plugin on the CPU
    assert check_math_mode("tf32", "jax", "tf32", on_gpu=True) == "tf32"
    assert check_math_mode("framework-default", "pytorch", "conv-tf32", on_gpu=True) == "conv-tf32"
    assert check_math_mode("framework-default", "plugin", None, on_gpu=True) == "unknown"
    with pytest.raises(ConfigError, match="asked for.*reads back 'tf32'.*not stored as a ieee run"):
        check_math_mode("ieee", "jax", "tf32", on_gpu=True)
    with pytest.raises(ConfigError, match="no TF32 tensor cores"):
        check_math_mode("tf32", "pytorch", "ieee", on_gpu=True)  # a V100: the switch is on, the units are not
    with pytest.raises(ConfigError, match="runs on the CPU"):
        check_math_mode("tf32", "pytorch", "n/a", on_gpu=False)
    with pytest.raises(ConfigError, match="does not report the math mode"):
        check_math_mode("ieee", "plugin", None, on_gpu=True)


def test_the_mode_follows_the_flags_the_units_and_nvidias_override():
    assert gpu_math_mode(True, True, True, {}) == "tf32"
    assert gpu_math_mode(True, False, True, {}) == "conv-tf32"  # PyTorch's default
    assert gpu_math_mode(False, True, True, {}) == "matmul-tf32"
    assert gpu_math_mode(False, False, True, {}) == "ieee"
    assert gpu_math_mode(True, True, False, {}) == "ieee"  # no TF32 units (Volta, Turing, Pascal)
    assert gpu_math_mode(True, True, None, {}) == "unknown"  # units unknown: cannot say TF32 ran
    assert gpu_math_mode(True, True, True, {"NVIDIA_TF32_OVERRIDE": "0"}) == "ieee"
    assert gpu_math_mode(True, True, True, {"NVIDIA_TF32_OVERRIDE": "0"}, override_covers=False) == "tf32"
    assert gpu_math_mode(None, False, True, {}) == "unknown"


# ------------------------------------------------------------------------ each framework's switches (stand-ins)
def _torch(new_api: bool, capability: tuple[int, int] = (9, 0)) -> Any:
    matmul = SimpleNamespace(fp32_precision="none") if new_api else SimpleNamespace(allow_tf32=False)
    cudnn = (SimpleNamespace(fp32_precision="none", conv=SimpleNamespace(fp32_precision="tf32")) if new_api
             else SimpleNamespace(allow_tf32=True))
    torch = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(matmul=matmul), cudnn=cudnn),
                            cuda=SimpleNamespace(get_device_capability=lambda i: capability), calls=[])
    if new_api:
        torch.backends.fp32_precision = "none"
    torch.set_float32_matmul_precision = lambda p: torch.calls.append(p)
    return torch


@pytest.mark.parametrize("new_api", [True, False])
def test_pytorch_applies_and_reads_back_with_the_api_its_version_has(new_api, monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    torch = _torch(new_api)
    assert pytorch_mm.read(torch, cuda=True) == "conv-tf32"  # torch's defaults: cuDNN TF32, cuBLAS float32
    assert pytorch_mm.read(torch, cuda=False) == "n/a"
    pytorch_mm.apply(torch, "tf32")
    assert pytorch_mm.read(torch, cuda=True) == "tf32"
    pytorch_mm.apply(torch, "ieee")
    assert pytorch_mm.read(torch, cuda=True) == "ieee"
    if new_api:  # never the legacy flags, which torch >= 2.9 refuses to mix with fp32_precision
        assert not hasattr(torch.backends.cuda.matmul, "allow_tf32") and torch.calls == []
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    else:
        assert torch.calls == ["high", "highest"]
    pytorch_mm.apply(torch, "tf32")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")  # cuBLAS and cuDNN ignore the flags then
    assert pytorch_mm.read(torch, cuda=True) == "ieee"
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE")
    assert pytorch_mm.read(_torch(new_api, (7, 0)), cuda=True) == "ieee"  # a V100


def test_tensorflow_and_jax_apply_and_read_back(monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    state = {"on": True}
    exp = SimpleNamespace(enable_tensor_float_32_execution=lambda on: state.update(on=on),
                          tensor_float_32_execution_enabled=lambda: state["on"],
                          get_device_details=lambda gpu: {"compute_capability": (8, 0)})
    tf = SimpleNamespace(config=SimpleNamespace(experimental=exp))
    assert tensorflow_mm.read(tf, "gpu0") == "tf32"  # TensorFlow's default since 2.4
    tensorflow_mm.apply(tf, "ieee")
    assert state["on"] is False and tensorflow_mm.read(tf, "gpu0") == "ieee" and tensorflow_mm.read(tf, None) == "n/a"

    config = SimpleNamespace(jax_default_matmul_precision=None)
    config.update = lambda key, value: setattr(config, key, value)
    jax = SimpleNamespace(config=config)
    gpu = SimpleNamespace(compute_capability="9.0")
    assert jax_mm.read(jax, gpu) == "tf32"  # XLA's default on an Ampere-or-newer GPU
    assert jax_mm.read(jax, SimpleNamespace(compute_capability="7.5")) == "ieee"  # a T4
    jax_mm.apply(jax, "ieee")
    assert config.jax_default_matmul_precision == "float32" and jax_mm.read(jax, gpu) == "ieee"
    jax_mm.apply(jax, "tf32")
    assert jax_mm.read(jax, gpu) == "tf32" and jax_mm.read(jax, None) == "n/a"
    config.jax_default_matmul_precision = "bfloat16"
    assert jax_mm.read(jax, gpu) == "unknown"  # never guessed


def test_mxnet_reads_ieee_only_where_both_backstops_are_set(monkeypatch):
    for var in (*mxnet_mm.TENSOR_CORE_VARS, "NVIDIA_TF32_OVERRIDE"):
        monkeypatch.delenv(var, raising=False)
    assert mxnet_mm.read(True) == "unknown" and mxnet_mm.read(False) == "n/a"
    mxnet_mm.apply("framework-default")
    assert mxnet_mm.read(True) == "unknown"
    mxnet_mm.apply("ieee")
    assert mxnet_mm.read(True) == "ieee"
    assert os.environ["MXNET_CUDA_ALLOW_TENSOR_CORE"] == "0" and os.environ["NVIDIA_TF32_OVERRIDE"] == "0"


def test_capabilities_read_from_names_and_tuples():
    assert mathmode.has_tf32((8, 0)) and mathmode.has_tf32("8.6") and mathmode.has_tf32("90")
    assert mathmode.has_tf32((7, 5)) is False and mathmode.has_tf32("6.1") is False
    assert mathmode.has_tf32(None) is None and mathmode.has_tf32("gfx90a") is None


# ------------------------------------------------------------------------------ the real frameworks, on the CPU
@pytest.mark.slow
@pytest.mark.parametrize("framework", BUILTINS)
def test_each_framework_reads_back_n_a_on_the_cpu(framework):
    # a fresh interpreter, in the framework's managed environment (`make test` builds them first: a framework whose
    # environment cannot be built fails here): setup() applies ieee and reads the mode back
    module, _, cls = adapter_target(framework).partition(":")
    code = (f"from {module} import {cls}\nfrom adapters.base import RuntimeConfig\n"
            f"info = {cls}().setup(RuntimeConfig(device='cpu', threads=1, math_mode='ieee'))\n"
            "print(info.math_mode_seen)\n")
    done = subprocess.run([python_for(framework), "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "n/a"
