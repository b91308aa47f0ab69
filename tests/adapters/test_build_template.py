"""The adapter base's common work, framework-free: the build template, device and precision, the optimizer switch."""

from __future__ import annotations

import importlib
import typing
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from adapters.base import Adapter, LayerSite, MemoryStats, OptimizerSpec, RuntimeConfig, WeightFeed
from adapters.building import layer_hook_name, resolve_gpu
from harness.config.experiment import parse_experiment
from harness.errors import AdapterError, ConfigError
from harness.models import (
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    Layer,
    ModelDescription,
    ReLU,
    build_description,
    init_weights,
)
from harness.registry import adapter_target, known_adapter_names


@dataclass(frozen=True)
class Unheard:
    """A layer type no adapter has a hook for."""


class Recorder(Adapter):
    """Builds nothing: records each hook call, so the template's walk can be checked without a framework."""

    name = "recorder"
    distributions = ("numpy",)
    import_name = "numpy"

    def __init__(self, skip_weights: bool = False) -> None:
        self.calls: list[tuple[str, tuple[int, ...], list[tuple[int, ...]]]] = []
        self.skip_weights = skip_weights
        self.optimizer: Any = None

    def begin_model(self, model: ModelDescription) -> None:
        self.calls = []

    def _record(self, layer: Layer, site: LayerSite, weights: WeightFeed, n: int) -> None:
        taken = [] if self.skip_weights else weights.take(n)
        self.calls.append((layer_hook_name(layer), site.in_shape, [a.shape for a in taken]))

    def layer_conv2d(self, layer: Conv2D, site: LayerSite, weights: WeightFeed) -> None:
        self._record(layer, site, weights, 1 + layer.use_bias)

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        self._record(layer, site, weights, 2)

    def layer_dense(self, layer: Dense, site: LayerSite, weights: WeightFeed) -> None:
        self._record(layer, site, weights, 2)

    def layer_relu(self, layer: ReLU, site: LayerSite, weights: WeightFeed) -> None:
        self._record(layer, site, weights, 0)

    layer_maxpool2d = layer_globalavgpool = layer_flatten = layer_relu

    def make_sgd(self, spec: OptimizerSpec) -> str:
        return f"sgd(lr={spec.lr})"

    def make_adam(self, spec: OptimizerSpec) -> str:
        return f"adam(lr={spec.lr})"

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        self.optimizer = optimizer

    # the rest of the contract is not exercised here
    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}

    def setup(self, runtime: RuntimeConfig) -> dict[str, Any]:
        return {"device": "cpu"}

    def param_count(self) -> int:
        return 0

    def get_weights(self) -> list[np.ndarray]:
        return []

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        return x, y

    def train_step(self, batch: Any) -> None:
        return None

    def predict(self, batch: Any) -> np.ndarray:
        return np.zeros((len(batch[0]), 2), np.float32)

    def reset_memory_stats(self) -> None:
        return None

    def memory_stats(self) -> MemoryStats:
        return MemoryStats(None, "none")

    def is_oom(self, exc: BaseException) -> bool:
        return False


def test_hook_names_follow_the_layer_class():
    names = {cls.__name__: layer_hook_name(cls) for cls in typing.get_args(Layer)}
    assert names["Conv2D"] == "layer_conv2d" and names["BatchNorm"] == "layer_batchnorm"
    assert names["MaxPool2D"] == "layer_maxpool2d" and names["GlobalAvgPool"] == "layer_globalavgpool"
    assert names["ReLU"] == "layer_relu" and names["Dense"] == "layer_dense"


def test_template_walks_every_layer_with_its_input_shape_and_weights():
    desc = build_description("tiny_cnn", (1, 8, 8), 3)
    adapter = Recorder()
    adapter.build(desc, init_weights(desc, 0), OptimizerSpec(name="adam", lr=0.5))
    ins = [desc.input_shape, *desc.shapes()[:-1]]
    assert [c[0] for c in adapter.calls] == [layer_hook_name(layer) for layer in desc.layers]
    assert [c[1] for c in adapter.calls] == ins
    assert [s for c in adapter.calls for s in c[2]] == desc.weight_shapes()
    assert adapter.optimizer == "adam(lr=0.5)"


def test_an_unknown_layer_is_refused_naming_the_hook_to_write():
    desc = ModelDescription("odd", (1, 4, 4), 2, (Flatten(), Unheard(), Dense(2)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"recorder adapter cannot build layer 1 Unheard\(\).*layer_unheard"):
        Recorder().build(desc, init_weights(desc, 0), OptimizerSpec())


def test_a_hook_that_skips_its_weights_is_an_adapter_error():
    desc = build_description("osu_cnn", (1, 8, 8), 3)
    with pytest.raises(AdapterError, match="took 0 of 6 weight arrays"):
        Recorder(skip_weights=True).build(desc, init_weights(desc, 0), OptimizerSpec())


def test_weights_that_do_not_match_the_description_are_refused():
    desc = build_description("osu_cnn", (1, 8, 8), 3)
    weights = init_weights(desc, 0)
    with pytest.raises(ConfigError, match="takes 6 weight arrays, 5 were given"):
        Recorder().build(desc, weights[:-1], OptimizerSpec())
    with pytest.raises(ConfigError, match=r"weight 0 has shape \(1, 2\)"):
        Recorder().build(desc, [np.zeros((1, 2), np.float32), *weights[1:]], OptimizerSpec())


def test_an_unknown_optimizer_is_refused_never_replaced_by_adam():
    desc = build_description("osu_cnn", (1, 8, 8), 3)
    spec = OptimizerSpec(name="rmsprop", lr=0.1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no optimizer 'rmsprop'; use one of adam, sgd"):
        Recorder().build(desc, init_weights(desc, 0), spec)


def test_device_resolution():
    assert resolve_gpu("auto", False, "X", "none") is False
    assert resolve_gpu("auto", True, "X", "none") is True
    assert resolve_gpu("cpu", True, "X", "none") is False
    with pytest.raises(ConfigError) as err:
        resolve_gpu("gpu", False, "MXNet", "mx.context.num_gpus() is 0", remedy="install mxnet-cu112")
    text = str(err.value)
    assert "MXNet sees no GPU (mx.context.num_gpus() is 0)" in text and "install mxnet-cu112, or use" in text


BUILTINS = ("pytorch", "tensorflow", "mxnet", "jax")


def _builtin_class(name: str) -> type[Adapter]:
    module, _, attr = adapter_target(name).partition(":") if name in known_adapter_names() else ("", "", "")
    if not module:
        pytest.fail(f"built-in adapter {name!r} is not registered: reinstall batchscope (make test)")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_adapter_has_a_hook_for_every_layer_type(name):
    cls = _builtin_class(name)
    missing = [layer_hook_name(t) for t in typing.get_args(Layer) if not hasattr(cls, layer_hook_name(t))]
    assert not missing, f"{name}: add {missing} (one hook per new layer type in harness.models)"
    assert hasattr(cls, "make_sgd") and hasattr(cls, "make_adam")


@pytest.mark.parametrize("name", BUILTINS)
def test_a_precision_the_adapter_does_not_apply_is_refused_in_the_parent(name):
    cls = _builtin_class(name)
    from harness.config.precision import PRECISIONS

    unsupported = [p for p in PRECISIONS if p not in cls.precisions_on("auto")]  # the experiment's default device
    assert "fp32" in cls.precisions_on("auto")
    for precision in unsupported:
        with pytest.raises(ConfigError) as err:
            parse_experiment({"name": "t", "frameworks": [name], "batch_sizes": [4], "precision": precision},
                             source="exp.toml")
        assert "exp.toml: precision" in str(err.value) and f"{precision!r} would not be applied" in str(err.value)
