"""Capabilities are detected from what an adapter overrides, and the built-in adapters have the ones they must.

No framework is imported: adapter classes are read, never instantiated.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.base import API_VERSION, CAPABILITIES, Adapter, capabilities, missing_capabilities
from harness.models import LAYER_TYPES
from harness.registry import adapter_class
from tests.fakes.adapter import FakeAdapter

BUILTINS = ("pytorch", "tensorflow", "mxnet", "jax")
#: the features (not required of built-ins) each built-in adapter deliberately lacks; the parent refuses them
#: for it (accumulate_steps > 1, a precision, a native model). A built-in losing any other capability fails here.
#: ``queued_steps`` (issue 40): MXNet's engine is the one whose wait after every step was measured to cost it time
BUILTIN_LACKS = {
    "pytorch": {"own_build", "queued_steps"},
    "tensorflow": {"native_models", "own_build", "step_memory_estimate", "queued_steps"},  # no public estimate (41)
    "mxnet": {"precisions", "native_models", "own_build", "step_memory_estimate"},
    "jax": {"accumulation", "precisions", "native_models", "own_build", "queued_steps"},
}


def test_the_api_version_is_two_and_the_builtins_declare_it():
    assert API_VERSION == 2
    assert Adapter.api_version == 1  # a plugin that says nothing was written before the version existed
    for name in BUILTINS:
        assert adapter_class(name).api_version == API_VERSION, name


@pytest.mark.parametrize("name", BUILTINS)
def test_each_builtin_adapter_has_every_required_capability(name):
    cls = adapter_class(name)
    have = set(capabilities(cls))
    assert {c.name for c in CAPABILITIES if c.required} <= have, sorted(have)
    assert {c.name for c in CAPABILITIES} - have == BUILTIN_LACKS[name]


def test_a_layer_hook_is_a_capability_for_every_layer_type():
    names = {c.name for c in CAPABILITIES}
    assert {f"layer_{t.lower()}" for t in LAYER_TYPES} <= names and "layer_residual" in names


class _Legacy(FakeAdapter):
    """Declares nothing new: as a plugin written against the first release would."""


class _Declares(FakeAdapter):
    precisions = ("fp32",)  # fp32 only, said explicitly: not a precision capability

    def layer_residual(self, layer: Any, site: Any, weights: Any) -> None:
        raise NotImplementedError

    def batchnorm_state(self) -> list[Any]:
        return []

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        return [MemoryError()], [ValueError()]

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        return None


def test_capabilities_are_the_hooks_a_class_overrides():
    legacy = set(capabilities(_Legacy))
    assert "own_build" in legacy  # FakeAdapter builds in its own build(), so its layers are found by trying
    assert not legacy & {"layer_residual", "batchnorm_state", "oom_examples", "accumulation"}
    assert "precisions" in legacy  # FakeAdapter declares bf16
    have = set(capabilities(_Declares))
    assert {"layer_residual", "batchnorm_state", "oom_examples"} <= have  # a classmethod override counts too
    assert "accumulation" not in have  # both hooks are needed: apply_accumulated is not overridden
    assert "precisions" not in have


def test_missing_capabilities_names_what_is_lacking_and_refuses_unknown_names():
    assert missing_capabilities(_Legacy, ("layer_residual", "own_build", "batchnorm_state")) == (
        "layer_residual", "batchnorm_state")
    with pytest.raises(ValueError, match="unknown capabilities"):
        missing_capabilities(_Legacy, ("layer_resdiual",))


def test_flat_gradient_is_a_capability_the_builtins_must_have_and_a_plugin_may_lack():
    from adapters.base import CAPABILITIES as caps

    row = next(c for c in caps if c.name == "flat_gradient")
    assert row.required  # required of the built-ins: the contract fails one without it
    from tests.contract.legacy.pytorch_v1 import PyTorchV1Adapter

    # a plugin written before it (the 0.1.0 adapter): unsupported in the suite, refused in the parent
    assert "flat_gradient" not in capabilities(PyTorchV1Adapter)
    for name in BUILTINS:
        assert "flat_gradient" in capabilities(adapter_class(name)), name
