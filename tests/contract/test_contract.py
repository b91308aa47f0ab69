"""The adapter contract: every registered adapter (or the ones given with --adapter) must pass these.

Each test reads the probe result of one adapter (computed in its own subprocess, see ``probe.py``), so
TensorFlow, MXNet and PyTorch never share a process. Each model and each capability is its own case: an
adapter that lacks a capability (``layer_residual``) gets "not supported: needs `layer_residual`" for the
cases that need it (``checks.py``; shown as UNSUPPORTED) and is judged on everything else. A built-in adapter
lacking a required capability fails instead. ``test_real_oom_trial_is_classified_oom`` goes further: it
provokes a real out-of-memory failure in a real worker under an address-space limit.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

from adapters.base import capabilities
from harness.data import DataRequest, prepare
from harness.records import TrialUnit
from harness.registry import adapter_class
from harness.run.executor import LocalExecutor
from tests.conftest import make_trial
from tests.contract import verdicts
from tests.contract.checks import MODELS, REFERENCE_COUNTS
from tests.contract.conftest import REFERENCE_ADAPTER, import_loads, resolve_target, shared_probes
from tests.contract.verdicts import LOGITS_ATOL, LOGITS_RTOL, WEIGHTS_ATOL, WEIGHTS_RTOL
from tests.helpers.contract import batchnorm_verdict
from tests.helpers.envs import python_for
from tests.helpers.shared import RUNS

pytestmark = pytest.mark.slow  # one probe per adapter (conftest.py), shared: SHARED_UNITS in tests/scheduling.py


def test_importing_the_adapter_module_loads_no_framework(adapter_name):
    module, _, attr = resolve_target(adapter_name).partition(":")
    message = verdicts.imports_no_framework(module, import_loads(module, attr))
    assert message is None, message


def test_versions_are_reported(adapter_name, probe):
    versions = probe(adapter_name).check("versions")["versions"]
    assert versions and all(isinstance(v, str) and v for v in versions.values()), versions
    cls = adapter_class(adapter_name) if ":" not in adapter_name else None
    if cls is not None:
        assert cls.import_name in versions or any(d in versions for d in cls.distributions), versions


def test_setup_returns_device_facts(adapter_name, probe):
    facts = probe(adapter_name).check("setup")["facts"]
    checked = probe(adapter_name).check("setup")
    facts = checked["facts"]
    assert checked["record_or_mapping"], f"setup() returned a {checked['returned']}: a SetupFacts, or a mapping"
    assert isinstance(facts, dict) and "device" in facts, facts
    cls = adapter_class(adapter_name) if ":" not in adapter_name else None
    if cls is not None and "math_modes" in capabilities(cls):  # the capability: the mode read back, n/a on the CPU
        assert facts.get("math_mode_seen") == "n/a", facts


@pytest.mark.parametrize("model", [m[0] for m in MODELS])
def test_param_count_matches_description(adapter_name, probe, model):
    record = probe(adapter_name).check(f"model/{model}")
    assert record["param_count"] == record["expected_param_count"]


@pytest.mark.parametrize("model", [m for m, _, _ in REFERENCE_COUNTS])
def test_residual_networks_have_the_published_parameter_counts(adapter_name, probe, model):
    """ResNet-18 at 3x224x224/1000 classes: 11,689,512 (torchvision); ResNet-20 at 10 classes: ~0.27 M."""
    record = probe(adapter_name).check(f"reference_count/{model}")
    assert record["param_count"] == record["description"] == record["reference"], record


@pytest.mark.parametrize("model", [m[0] for m in MODELS])
def test_output_shape(adapter_name, probe, model):
    record = probe(adapter_name).check(f"model/{model}")
    assert record["output_shape"] == record["expected_output_shape"]


@pytest.mark.parametrize("model", [m[0] for m in MODELS])
def test_get_weights_round_trips_init_weights_exactly(adapter_name, probe, model):
    record = probe(adapter_name).check(f"model/{model}")
    assert record["round_trip_shapes"] == record["expected_shapes"]
    assert record["round_trip_exact"], (
        "get_weights() right after build() must give back init_weights() bit for bit"
    )


def test_loss_decreases_on_a_fixed_batch(adapter_name, probe):
    record = probe(adapter_name).check("learns")
    assert record["loss_after"] < 0.5 * record["loss_before"], record


def test_evaluate_gives_accuracy_in_unit_interval(adapter_name, probe):
    record = probe(adapter_name).check("evaluates")
    assert record["samples"] == 50
    assert 0.0 <= record["accuracy"] <= 1.0
    assert math.isfinite(record["loss"]) and record["loss"] > 0


def test_train_step_returns_after_its_work(adapter_name, probe):
    """The first read after a step finds nothing left to wait for (a step that waits has its work inside)."""
    this = probe(adapter_name)
    message = verdicts.step_waits(this.check("step_timing"), this.import_name)
    assert message is None, message


def test_queued_steps_train_what_waited_steps_train_and_the_wait_waits(adapter_name, probe):
    """The optional ``queued_steps`` (issue 40): the worker queues a window of steps and reads its clock after
    ``wait_steps``, so the queued steps must be the same steps, and the wait must wait for all of them. An adapter
    without it is told "not supported": its steps are timed one by one, as before."""
    this = probe(adapter_name)
    message = verdicts.queued_steps(this.arrays, this.check("queued_steps"))
    assert message is None, message


def test_a_step_whose_work_fails_fails_inside_train_step(adapter_name, failing_step_probe):
    """A step on a batch far past a memory limit raises in train_step (or ends the process there): a step
    that returns first hides the failure, and its trial would be stored ok at an impossible speed. On a CPU
    this finds the missing wait that timing cannot: JAX with donated buffers waits inside the call when the
    step succeeds, but not when it fails."""
    this = failing_step_probe(adapter_name)
    message = verdicts.failing_step(this.check("failing_step"), this.import_name)
    assert message is None, message


def test_accumulating_two_half_batches_equals_one_step(adapter_name, probe):
    this = probe(adapter_name)
    message = verdicts.accumulation(this.arrays, this.check("accumulation"))
    assert message is None, message


def test_flat_gradient_is_the_references_and_changes_nothing(adapter_name, probe):
    """The gradient-noise hook: the gradient the first SGD step applies, equal to PyTorch's for the same weights
    and batch, and no change to weights, running statistics or the optimizer's state."""
    this, ref = probe(adapter_name), probe(REFERENCE_ADAPTER)
    record = this.check("flat_gradient")
    ref.check("flat_gradient")
    message = verdicts.flat_gradient(this.arrays, record, ref.arrays)
    assert message is None, message


def test_is_oom_recognises_the_frameworks_real_errors(adapter_name, probe):
    message = verdicts.oom_classification(probe(adapter_name).check("oom"))
    assert message is None, message


def test_isolated_layers_match_numpy(adapter_name, probe):
    this = probe(adapter_name)
    this.check("isolated")
    message = verdicts.isolated_layers(this.arrays)
    assert message is None, message


def test_batchnorm_running_statistics_match_the_reference(adapter_name, probe):
    message = batchnorm_verdict(probe(adapter_name), probe(REFERENCE_ADAPTER))
    assert message is None, message


def test_inference_after_training_matches_the_reference(adapter_name, probe):
    this, ref = probe(adapter_name), probe(REFERENCE_ADAPTER)
    this.check("after_training")
    ref.check("after_training")
    message = verdicts.predictions_after_training(this.arrays["after/logits"], ref.arrays["after/logits"])
    assert message is None, message


@pytest.mark.parametrize("model", [m[0] for m in MODELS])
def test_same_first_batch_and_updates_as_the_reference(adapter_name, probe, model):
    """Same init weights and batch: the same logits, loss, and weights after a few SGD steps."""
    this, ref = probe(adapter_name), probe(REFERENCE_ADAPTER)
    steps = this.check(f"model/{model}")["steps"]
    ref.check(f"model/{model}")
    np.testing.assert_allclose(
        this.arrays[f"{model}/logits0"], ref.arrays[f"{model}/logits0"], rtol=LOGITS_RTOL, atol=LOGITS_ATOL,
        err_msg=f"{model}: first-batch logits (if only osu_cnn differs, look at Flatten -> Dense; if "
        "tiny_cnn and deep_cnn differ, at BatchNorm in predict(): see the isolated-layer check)",
    )
    np.testing.assert_allclose(this.arrays[f"{model}/loss0"], ref.arrays[f"{model}/loss0"], rtol=1e-5,
                               err_msg=f"{model}: first-batch loss")
    keys = sorted(k for k in ref.arrays if k.startswith(f"{model}/sgd{steps}/"))
    assert keys, f"the reference recorded no weights for {model}"
    for key in keys:
        np.testing.assert_allclose(this.arrays[key], ref.arrays[key], rtol=WEIGHTS_RTOL, atol=WEIGHTS_ATOL,
                                   err_msg=f"{key}: weights after the probe's SGD steps")


def test_same_updates_as_the_reference_with_adam(adapter_name, probe):
    this, ref = probe(adapter_name), probe(REFERENCE_ADAPTER)
    this.check("adam")
    ref.check("adam")
    keys = sorted(k for k in ref.arrays if k.startswith("adam/"))
    assert keys, "the reference recorded no weights after its Adam steps"
    for key in keys:
        np.testing.assert_allclose(this.arrays[key], ref.arrays[key], rtol=WEIGHTS_RTOL, atol=WEIGHTS_ATOL,
                                   err_msg=f"{key}: weights after the probe's Adam steps")


def test_real_oom_trial_is_classified_oom(adapter_name, cache_dir: Path, tmp_path: Path):
    """A batch that cannot fit a 3 GiB address space fails in a real worker, and is recorded as oom.

    Depending on the framework the failure is a Python exception (PyTorch, MXNet: is_oom) or an abort in
    native code (TensorFlow's oneDNN path: the adapter's stderr patterns); both must end up as ``oom``.
    """
    data = prepare(
        DataRequest(
            name="synthetic", synthetic_shape=(1, 28, 28), synthetic_classes=10, synthetic_samples=64
        ),
        cache_dir,
    )
    target = resolve_target(adapter_name)
    module_name, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    trial = make_trial(cls.name, batch_size=30000, warmup_steps=1, timed_steps=1, eval=False, timeout_s=300)
    unit = TrialUnit(
        trial=trial,
        data=data,
        order_path=str(data.write_order(0, 0)),
        adapter_target=target,
        python=python_for(target),
        oom_patterns=cls.oom_stderr_patterns,
        os_memory_limit_mib=3000,
    )
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "oom", f"{outcome.status}: {outcome.reason}\n{outcome.stderr_tail}"


def test_the_probe_ran_once_in_this_worker(adapter_name, probe):
    """Last in the module: every test above read this adapter's probe, and it ran once (tests/helpers/shared.py), or
    not at all where the probe was handed over from another run (SHARED_PROBES_ENV)."""
    probe(adapter_name)
    ran = RUNS[f"probe[{adapter_name}]"]
    assert ran == (0 if adapter_name in shared_probes() else 1), (adapter_name, dict(RUNS))


def test_a_batch_size_change_trains_the_references_steps(adapter_name, probe):
    """A batch-size schedule's change (issue 52): k steps at one size, a new learning rate (``set_learning_rate``,
    capability ``lr_change``), m steps at another, equal to the reference step for step (Adam, plain SGD, SGD with
    momentum: the new rate applies to the whole momentum, checked against NumPy too), BatchNorm statistics carried
    over. An adapter without the capability is told "not supported"; it runs schedules whose rate does not change."""
    this, ref = probe(adapter_name), probe(REFERENCE_ADAPTER)
    record = this.check("batch_change")
    ref.check("batch_change")
    message = verdicts.batch_change(this.arrays, ref.arrays, record)
    assert message is None, message
