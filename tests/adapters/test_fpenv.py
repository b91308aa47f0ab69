"""FTZ/DAZ on the CPU (adapters/fpenv.py) and what the worker records about denormals."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from adapters import fpenv
from harness.records import TrialUnit
from harness.run.executor import LocalExecutor
from tests import ROOT
from tests.conftest import make_trial
from tests.helpers.envs import python_for

X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"
TARGET = "tests.fakes.adapter:FakeAdapter"


@pytest.mark.process
@pytest.mark.skipif(not X86_LINUX, reason="FTZ/DAZ through MXCSR exists only on x86-64 (this is not one)")
def test_flush_makes_a_denormal_result_zero_and_clearing_restores_it():
    # in a child interpreter: MXCSR is per thread and must not leak into this test process
    code = ("import numpy as np; from adapters import fpenv\n"
            "tiny = np.float32(1e-38) / np.float32(100)\n"
            "assert tiny != 0 and fpenv.cpu_denormals_state() == 'keep'\n"
            "assert fpenv.set_cpu_flush(True) and fpenv.cpu_denormals_state() == 'flush'\n"
            "assert np.float32(1e-38) / np.float32(100) == 0\n"
            "assert fpenv.set_cpu_flush(False) and np.float32(1e-38) / np.float32(100) == tiny\n"
            "import threading; seen = []\n"
            "fpenv.set_cpu_flush(True)\n"
            "t = threading.Thread(target=lambda: seen.append(fpenv.cpu_denormals_state())); t.start(); t.join()\n"
            "assert seen == ['flush'], seen  # a thread started afterwards inherits it: how MXNet's pools get it\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_reading_elsewhere_says_unknown_rather_than_guessing(monkeypatch):
    monkeypatch.setattr(fpenv, "_libm", lambda: None)
    assert fpenv.read_mxcsr() is None
    assert fpenv.cpu_denormals_state() == "unknown"
    assert fpenv.set_cpu_flush(True) is False


def _run(tiny_data, tmp_path, **kw):
    trial = make_trial(**kw)
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)), adapter_target=TARGET)
    return LocalExecutor(log_dir=tmp_path).run(unit)


@pytest.mark.process
@pytest.mark.skipif(not X86_LINUX, reason="FTZ/DAZ through MXCSR exists only on x86-64 (this is not one)")
def test_the_worker_records_what_the_cpu_did_and_refuses_a_flush_that_did_not_happen(tiny_data, tmp_path):
    flushed = _run(tiny_data, tmp_path, denormals="flush")
    assert flushed.status == "ok" and flushed.metrics is not None
    assert flushed.metrics.cpu_denormals == "flush"  # set by the worker before the adapter was loaded
    kept = _run(tiny_data, tmp_path, denormals="framework-default")
    assert kept.status == "ok" and kept.metrics is not None and kept.metrics.cpu_denormals == "keep"
    undone = _run(tiny_data, tmp_path, denormals="flush", adapter_options={"behaviour": "keeps_denormals"})
    assert undone.status == "error" and undone.metrics is None
    assert "denormals = 'flush' was asked for" in undone.reason and "framework-default" in undone.reason


# a denormal made on the framework's own threads: a large tensor is split across its thread pool
_DENORMAL_PROBE = {
    "pytorch": ("import torch\n"
                "x = torch.full((1 << 20,), 1e-38, dtype=torch.float32) / 100\n"
                "small = float(torch.tensor([1e-38]) / 100)\n"
                "print(int((x != 0).sum()), small != 0)\n"),
    "mxnet": ("import mxnet as mx\n"
              "x = mx.nd.full((1 << 20,), 1e-38, dtype='float32') / 100\n"
              "small = (mx.nd.array([1e-38]) / 100).asnumpy()[0]\n"
              "print(int((x != 0).sum().asscalar()), small != 0)\n"),
    "tensorflow": ("import tensorflow as tf\n"
                   "x = tf.fill([1 << 20], tf.constant(1e-38, tf.float32)) / 100\n"
                   "small = float((tf.constant([1e-38]) / 100)[0])\n"
                   "print(int(tf.math.count_nonzero(x)), small != 0)\n"),
}
_ADAPTERS = {"pytorch": "adapters.pytorch:PyTorchAdapter", "mxnet": "adapters.mxnet:MXNetAdapter",
             "tensorflow": "adapters.tensorflow:TensorFlowAdapter"}


@pytest.mark.slow
@pytest.mark.skipif(not X86_LINUX, reason="FTZ/DAZ through MXCSR exists only on x86-64 (this is not one)")
@pytest.mark.parametrize("framework, mode, flushed", [
    ("pytorch", "flush", True), ("pytorch", "framework-default", False),
    ("mxnet", "flush", True), ("mxnet", "framework-default", False),
    ("tensorflow", "flush", True), ("tensorflow", "framework-default", True),  # TF always flushes
])
def test_setup_makes_the_framework_itself_flush_or_keep_denormals(framework, mode, flushed):
    # a fresh interpreter per case: setup() must act before the framework's import, and MXCSR is per process
    module, _, cls = _ADAPTERS[framework].partition(":")
    code = (f"from {module} import {cls}\nfrom adapters.base import RuntimeConfig\n"
            f"info = {cls}().setup(RuntimeConfig(device='cpu', threads=2, denormals={mode!r}))\n"
            "print(info.cpu_denormals)\n" + _DENORMAL_PROBE[framework])
    done = subprocess.run([python_for(framework), "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    recorded, probe = done.stdout.strip().splitlines()[-2:]
    nonzero, small_kept = probe.split()
    assert recorded == ("flush" if flushed else "keep")
    if flushed:
        assert nonzero == "0" and small_kept == "False"  # what is recorded is what the framework did
    else:
        assert int(nonzero) == 1 << 20 and small_kept == "True"
