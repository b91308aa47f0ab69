"""The contract suite rejects wrong adapters: each broken copy under ``tests/contract/broken/`` fails its check.

Every broken adapter is the PyTorch adapter with one defect. Each runs through the contract's probe
(a subprocess of its own, only the checks that matter to it) and the verdict aimed at its defect must
fail with a message that names the likely cause; the real PyTorch adapter, probed the same way, is the
reference and passes them (``test_contract.py`` checks that for every registered adapter).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.contract import verdicts
from tests.contract.conftest import REFERENCE_ADAPTER, ProbeResult, import_loads, run_failing_step, run_probe
from tests.helpers.contract import batchnorm_verdict

pytestmark = pytest.mark.slow

BROKEN = "tests.contract.broken"


@pytest.fixture(scope="module")
def broken_probe(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, tuple[str, ...]], ProbeResult]:
    """``broken_probe("module:Class", checks)``: that broken adapter's probe result."""

    def get(target: str, checks: tuple[str, ...]) -> ProbeResult:
        out: Path = tmp_path_factory.mktemp(target.rpartition(":")[2])
        return run_probe(f"{BROKEN}.{target}", out, checks)

    return get


def test_flipped_batchnorm_momentum_is_named(broken_probe, probe):
    this = broken_probe("momentum_flipped:MomentumFlipped", ("batchnorm",))
    message = batchnorm_verdict(this, probe(REFERENCE_ADAPTER))
    assert message is not None and "momentum convention is flipped" in message, message


def test_a_biased_running_variance_declared_unbiased_is_named(broken_probe, probe):
    this = broken_probe("biased_variance:BiasedVariance", ("batchnorm",))
    message = batchnorm_verdict(this, probe(REFERENCE_ADAPTER))
    assert message is not None and "uses the biased batch variance" in message, message


def test_a_module_level_framework_import_is_named():
    module = f"{BROKEN}.toplevel_import"
    message = verdicts.imports_no_framework(module, import_loads(module, framework="pytorch"))
    assert message is not None and "loaded torch" in message and "inside the adapter's methods" in message


def test_a_step_that_returns_before_the_work_is_done_is_named(broken_probe):
    """A step that queues its work and returns: the first read after it waits for the whole step."""
    this = broken_probe("lazy_step:LazyStep", ("step_timing",))
    record = this.check("step_timing")
    message = verdicts.step_waits(record, this.import_name)
    assert message is not None and "train_step returns before its work is done" in message, (message, record)
    assert "torch.cuda.synchronize()" in message, message  # the missing synchronisation, named


def test_a_lazy_step_hides_its_failure_until_the_next_read(tmp_path):
    """The same lazy step on a batch that cannot fit: the step returns, the read raises the step's failure."""
    this = run_failing_step(f"{BROKEN}.lazy_step:LazyStep", tmp_path)
    record = this.check("failing_step")
    message = verdicts.failing_step(record, this.import_name)
    assert record["outcome"] == "read_raised", record
    assert message is not None and "train_step returned before its work was done" in message, message


def test_jax_without_block_until_ready_is_named(tmp_path):
    """JAX with donated buffers waits inside the call when the step succeeds (timing sees nothing), but an
    out-of-memory step returns at once and its error surfaces at the next read: the failing-step check names
    jax.block_until_ready."""
    this = run_failing_step(f"{BROKEN}.jax_no_sync:JAXNoSync", tmp_path)
    record = this.check("failing_step")
    message = verdicts.failing_step(record, this.import_name)
    assert record["outcome"] == "read_raised", record
    assert message is not None and "jax.block_until_ready" in message, message


def test_flatten_in_the_wrong_order_is_named(broken_probe):
    this = broken_probe("flatten_order:FlattenOrder", ("isolated",))
    this.check("isolated")
    message = verdicts.isolated_layers(this.arrays)
    assert message is not None and "flattens in another order than C-major" in message, message


def test_predict_in_training_mode_is_named(broken_probe, probe):
    this = broken_probe("predict_training_mode:PredictTrainingMode", ("isolated", "after_training"))
    this.check("isolated")
    message = verdicts.isolated_layers(this.arrays)
    assert message is not None and "BatchNorm runs in training mode in predict()" in message, message
    ref = probe(REFERENCE_ADAPTER)
    ref.check("after_training")
    after = verdicts.predictions_after_training(this.arrays["after/logits"], ref.arrays["after/logits"])
    assert after is not None and "predict() uses the wrong BatchNorm statistics" in after, after


def test_an_is_oom_that_knows_only_memory_error_is_named(broken_probe):
    message = verdicts.oom_classification(broken_probe("oom_unrecognised:OOMUnrecognised", ("oom",)).check("oom"))
    assert message is not None and "does not recognise the framework's out-of-memory errors" in message, message


def test_an_adapter_that_supplies_no_oom_examples_is_named():
    record = {"supplied": False, "oom_recognised": [], "not_oom_recognised": []}
    message = verdicts.oom_classification(record)
    assert message is not None and "override the classmethod oom_examples()" in message


def test_a_rate_change_whose_momentum_keeps_the_old_rate_is_named(broken_probe, probe):
    """set_learning_rate that leaves the old rate in the momentum (Keras' and MXNet's velocity as they come): the
    batch-change case names the first step after the change and says to rescale the velocity."""
    this = broken_probe("lr_keeps_old_rate:LrKeepsOldRate", ("batch_change",))
    message = verdicts.batch_change(this.arrays, probe(REFERENCE_ADAPTER).arrays, this.check("batch_change"))
    assert message is not None and "the first after set_learning_rate" in message, message
    assert "kept the old rate" in message and "scale such a velocity by new/old" in message, message
