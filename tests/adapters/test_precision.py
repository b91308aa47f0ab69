"""Precision and PyTorch's allocator settings, framework-free: what each adapter declares per device, the
refusals in the parent, the worker's check of the observed compute dtype, and the environment the allocator
settings put in a worker. The framework runs are in tests/adapters/test_precision_frameworks.py (slow)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import Adapter, PrecisionSeen
from adapters.pytorch import PyTorchAdapter
from adapters.pytorch.gpu import ALLOC_CONF_VARS, alloc_conf
from harness.config.experiment import parse_experiment
from harness.config.precision import PRECISIONS, check_observed
from harness.errors import ConfigError
from harness.registry import adapter_class
from tests.conftest import make_trial

BASE = {"name": "t", "batch_sizes": [4]}

#: what the bundled adapters run, per device (docs/precision.md's table); a change there must change this
RUNS = {
    "pytorch": {"cpu": {"fp32", "bf16"}, "gpu": {"fp32", "amp", "bf16"}},
    "tensorflow": {"cpu": {"fp32", "bf16"}, "gpu": {"fp32", "amp", "bf16"}},
    "mxnet": {"cpu": {"fp32"}, "gpu": {"fp32"}},
    "jax": {"cpu": {"fp32"}, "gpu": {"fp32"}},
}


def parse(framework: str, **changes: Any):
    return parse_experiment({**BASE, "frameworks": [framework], **changes}, source="exp.toml")


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_each_adapter_declares_what_it_runs_per_device(framework):
    cls = adapter_class(framework)
    for device, runs in RUNS[framework].items():
        assert set(cls.precisions_on(device)) == runs, device
    assert set(cls.precisions_on("auto")) == RUNS[framework]["cpu"] & RUNS[framework]["gpu"]


@pytest.mark.parametrize("framework", sorted(RUNS))
@pytest.mark.parametrize("device", ["cpu", "gpu", "auto"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_parent_accepts_exactly_what_runs_and_refuses_the_rest_saying_what_to_set(framework, device, precision):
    runs = RUNS[framework]
    ok = precision in (runs["cpu"] & runs["gpu"] if device == "auto" else runs[device])
    if ok:
        assert parse(framework, device=device, precision=precision).precision == precision
        return
    with pytest.raises(ConfigError) as err:
        parse(framework, device=device, precision=precision)
    msg = str(err.value)
    assert msg.startswith("exp.toml: precision: ")
    assert f"{precision!r}" in msg and f"{framework} adapter" in msg  # which setting, which framework
    assert "would not be applied" in msg  # why it is refused
    assert "set device = " in msg or "set precision = " in msg  # what to set instead
    if device != "auto":
        assert {"cpu": "the CPU", "gpu": "a GPU"}[device] in msg  # which device


def test_amp_on_the_cpu_is_refused_for_pytorch_naming_the_device_the_reason_and_bf16():
    with pytest.raises(ConfigError) as err:
        parse("pytorch", device="cpu", precision="amp")
    msg = str(err.value)
    assert "'amp' is not run by the pytorch adapter on the CPU" in msg
    assert "GradScaler is PyTorch's CUDA recipe" in msg  # why
    assert "set precision = 'fp32' or 'bf16', or device = 'gpu'" in msg  # what instead


def test_amp_under_auto_is_refused_because_the_worker_may_land_on_the_cpu():
    # the parent cannot know whether the framework will find a GPU (it imports none): amp needs device = "gpu"
    with pytest.raises(ConfigError) as err:
        parse("tensorflow", device="auto", precision="amp")
    msg = str(err.value)
    assert "is run by the tensorflow adapter on a GPU only" in msg and "device = 'auto'" in msg
    assert "set device = 'gpu'" in msg and "one of 'fp32', 'bf16'" in msg
    assert parse("tensorflow", device="gpu", precision="amp").precision == "amp"


def test_mixed_precision_is_refused_for_jax_and_mxnet_with_their_reason():
    with pytest.raises(ConfigError, match=r"'bf16' is not run by the jax adapter on any device \(mixed precision "
                                          r"is not implemented in the JAX adapter"):
        parse("jax", precision="bf16")
    with pytest.raises(ConfigError) as err:
        parse("mxnet", device="cpu", precision="bf16")
    assert "mxnet adapter on the CPU" in str(err.value) and "bfloat16" in str(err.value)


def test_a_variant_that_asks_for_a_precision_its_device_does_not_run_is_refused():
    with pytest.raises(ConfigError, match=r"variants.half: .*'amp' is not run by the pytorch adapter on the CPU"):
        parse("pytorch", device="cpu", variants={"plain": {"precision": "fp32"}, "half": {"precision": "amp"}})
    exp = parse("pytorch", device="cpu", variants={"plain": {"precision": "fp32"}, "bf16": {"precision": "bf16"}})
    assert [v.precision for _, v in exp.resolved_variants()] == ["fp32", "bf16"]


def test_a_plugin_that_declares_precisions_without_devices_runs_them_on_every_device():
    class Old(Adapter):  # written before precisions were per device: its declaration keeps its meaning
        name = "old"
        precisions = ("fp32", "amp")

    assert Old.precisions_on("cpu") == Old.precisions_on("gpu") == Old.precisions_on("auto") == ("fp32", "amp")
    assert Old.validate_precision("amp", "cpu") == "amp"
    with pytest.raises(ConfigError, match="'bf16' is not run by the old adapter on any device"):
        Old.validate_precision("bf16")


def test_the_max_batch_search_refuses_the_same_with_its_own_flags():
    """Checked against the adapter that runs it (the class the command looked up once: ``check_adapter``)."""
    from harness.maxbatch.request import MaxBatchRequest
    from harness.registry import adapter_class

    torch = adapter_class("pytorch")
    with pytest.raises(ConfigError, match=r"--precision 'amp': .*pytorch adapter on the CPU.*or --device 'gpu'"):
        MaxBatchRequest(framework="pytorch", model="deep_cnn", precision="amp", device="cpu").check_adapter(torch)
    with pytest.raises(ConfigError, match=r"--precision 'amp': .*use --device 'gpu'"):
        MaxBatchRequest(framework="pytorch", model="deep_cnn", precision="amp").check_adapter(torch)  # device auto
    req = MaxBatchRequest(framework="pytorch", model="deep_cnn", precision="bf16")
    assert req.check_adapter(torch) is req and req.precision == "bf16"


# ---- the worker's proof: the observed compute dtype -----------------------------------------------------


@pytest.mark.parametrize(("precision", "dtype", "scale"), [("fp32", "float32", None), ("bf16", "bfloat16", None),
                                                           ("amp", "float16", 65536.0), ("fp32", None, None)])
def test_an_observed_dtype_that_matches_passes(precision, dtype, scale):
    check_observed(precision, "pytorch", dtype, scale)


@pytest.mark.parametrize(("precision", "dtype", "words"), [
    ("bf16", "float32", "computed in float32"),  # the knob ignored: an fp32 run must not be stored as bf16
    ("fp32", "bfloat16", "computed in bfloat16"),  # a policy leaked from elsewhere: not an fp32 run either
    ("amp", "bfloat16", "computed in bfloat16"),
    ("bf16", None, "does not report the dtype"),  # an adapter that cannot show it ran
])
def test_an_observed_dtype_that_does_not_match_fails_the_trial(precision, dtype, words):
    with pytest.raises(ConfigError) as err:
        check_observed(precision, "pytorch", dtype, None)
    assert words in str(err.value) and f"precision = {precision!r} was asked for" in str(err.value)


def test_amp_without_a_loss_scale_is_not_amp():
    with pytest.raises(ConfigError, match="reports no loss scale"):
        check_observed("amp", "tensorflow", "float16", None)


def test_the_worker_fails_a_trial_whose_adapter_did_not_compute_in_the_precision_asked_for():
    from harness.run.worker.trial import _precision_seen

    class Seen:
        def __init__(self, seen: PrecisionSeen | None) -> None:
            self.seen = seen

        def precision_seen(self) -> PrecisionSeen | None:
            return self.seen

    bf16 = make_trial("pytorch", precision="bf16")
    assert _precision_seen(bf16, Seen(PrecisionSeen("bfloat16"))) == PrecisionSeen("bfloat16")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="computed in float32"):
        _precision_seen(bf16, Seen(PrecisionSeen("float32")))  # type: ignore[arg-type]
    assert _precision_seen(make_trial("fake"), Seen(None)) is None  # type: ignore[arg-type]


def test_the_observed_dtype_and_loss_scale_are_stored_per_trial(tmp_path):
    from harness.records import TrialOutcome, WorkerMetrics
    from harness.store import Store

    outcome = TrialOutcome(trial=make_trial("pytorch", precision="bf16"), status="ok",
                           metrics=WorkerMetrics(compute_dtype="bfloat16", loss_scale=None))
    with Store.open(tmp_path) as store:
        store.write_trial(outcome, store.begin_run("test", {}, "", {}), {})
        row = store.trials()[0]
    assert (row["precision"], row["compute_dtype"], row["loss_scale"]) == ("bf16", "bfloat16", None)


# ---- PyTorch's CUDA allocator settings ------------------------------------------------------------------


def test_allocator_settings_are_validated_in_the_parent_and_written_as_pytorch_reads_them():
    options = PyTorchAdapter.validate_options({"expandable_segments": True, "max_split_size_mb": 128,
                                               "garbage_collection_threshold": 0.8})
    assert alloc_conf(options) == "expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.8"
    assert PyTorchAdapter.validate_options({}) == {}  # nothing set: nothing in the trial (its hash is unchanged)


@pytest.mark.parametrize(("options", "words"), [
    ({"expandable_segments": "yes"}, "is not true or false"),
    ({"max_split_size_mb": 20}, ">= 21"),
    ({"max_split_size_mb": 64.5}, "whole number"),
    ({"max_split_size_mb": True}, "whole number"),
    ({"garbage_collection_threshold": 1.0}, "in (0, 1)"),
    ({"roundup_power2_divisions": 4}, "valid settings: native_model, expandable_segments, max_split_size_mb"),
])
def test_bad_allocator_settings_are_refused_with_what_is_valid(options, words):
    with pytest.raises(ConfigError) as err:
        parse("pytorch", device="gpu", adapters={"pytorch": options})
    assert "exp.toml: adapters.pytorch" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_allocator_settings_where_the_trial_may_run_on_the_cpu_are_refused(device):
    with pytest.raises(ConfigError) as err:
        parse("pytorch", device=device, adapters={"pytorch": {"expandable_segments": True}})
    msg = str(err.value)
    assert msg.startswith("exp.toml: adapters.pytorch: expandable_segments: PyTorch's CUDA caching-allocator")
    assert "would not be applied" in msg and "set device = 'gpu'" in msg
    exp = parse("pytorch", device="gpu", adapters={"pytorch": {"expandable_segments": True}})
    assert exp.adapters["pytorch"].options == {"expandable_segments": True}


def test_a_variant_may_try_allocator_settings_on_a_gpu():
    exp = parse("pytorch", device="gpu", variants={
        "plain": {}, "expandable": {"adapters": {"pytorch": {"expandable_segments": True}}}})
    options = [dict(v.adapters["pytorch"].options) if "pytorch" in v.adapters else {}
               for _, v in exp.resolved_variants()]
    assert options == [{}, {"expandable_segments": True}]
    with pytest.raises(ConfigError, match="variants.expandable: .*would not be applied"):
        parse("pytorch", device="cpu", variants={
            "plain": {}, "expandable": {"adapters": {"pytorch": {"expandable_segments": True}}}})


def test_the_settings_reach_the_worker_environment_of_a_sweep_trial_and_of_a_probe():
    from harness.run.sweep import worker_env

    options = {"expandable_segments": True, "max_split_size_mb": 128}
    trial = make_trial("pytorch", device="gpu", adapter_options=options)
    env = worker_env(trial, {"gpus": [{"name": "card"}]})
    want = "expandable_segments:True,max_split_size_mb:128"
    assert {var: env[var] for var in ALLOC_CONF_VARS} == dict.fromkeys(ALLOC_CONF_VARS, want)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in worker_env(make_trial("pytorch", device="gpu"), {"gpus": [{}]})
    assert "PYTORCH_CUDA_ALLOC_CONF" not in worker_env(make_trial("tensorflow", device="cpu"), {})

    from harness.maxbatch.advice import answer_env

    # a max-batch answer found under these settings holds under them only: they are part of the answer
    assert answer_env(dict.fromkeys(ALLOC_CONF_VARS, want), {})["PYTORCH_CUDA_ALLOC_CONF"] == want


def test_the_pytorch_worker_refuses_settings_that_did_not_reach_it(monkeypatch):
    adapter = PyTorchAdapter()
    options = {"expandable_segments": True}
    with pytest.raises(ConfigError, match="do nothing on the CPU"):
        adapter._check_allocator_settings(options)  # a direct caller on a CPU
    adapter.cuda = True
    for var in ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="were not in this worker's environment when torch was imported"):
        adapter._check_allocator_settings(options)
    for var, value in PyTorchAdapter.worker_env(options, "gpu").items():
        monkeypatch.setenv(var, value)
    assert adapter._check_allocator_settings(options) == {"cuda_alloc_conf": "expandable_segments:True"}
    assert adapter._check_allocator_settings({}) == {}


def test_a_refusal_names_the_experiment_key_or_inside_as_flags_the_command_line_flag():
    """One message, worded where the setting was given (issue 30: no str.replace of an adapter's text)."""
    from harness.config.precision import Worded, as_flags, set_setting, setting

    assert (setting("math_mode", "tf32"), set_setting("device", "gpu")) == ("math_mode = 'tf32'", "set device = 'gpu'")
    with as_flags():
        assert (setting("math_mode", "tf32"), set_setting("device", "gpu")) == ("--math-mode 'tf32'",
                                                                                "use --device 'gpu'")
        assert setting("precision", Worded("one of 'fp32', 'bf16'")) == "--precision one of 'fp32', 'bf16'"
        with pytest.raises(ConfigError) as refused:
            adapter_class("pytorch").validate_precision("amp", "auto")
    assert setting("device") == "device"  # the context ends with the block
    assert "--device 'gpu'" in str(refused.value) and "device = " not in str(refused.value), refused.value
