"""The contract's checks and the capabilities each needs: the one table the probe and the tests share.

Each check is run and judged on its own, so a plugin that lacks a capability (``layer_residual``, say) is told
"not supported: needs `layer_residual`" for the checks that need it, and passes or fails the others on their
merits. A check needs the layer hooks of the models it builds (found by walking their descriptions) plus the
capabilities named in ``needs`` (:data:`adapters.base.CAPABILITIES`). To add a check: a row here (its probe
method, what it builds, what else it needs), the method in ``probe.py``, and a test that reads its record.

Framework-free: imported by the pytest process and by the probe's subprocess alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.base import Adapter, layer_hook_name, missing_capabilities
from harness.models import ModelDescription, Residual, build_description
from harness.models.description import Layer
from tests.contract.verdicts import ACCUMULATION_MODEL, ISOLATED

#: (model, input shape, classes): every layer kind; osu_cnn on a non-square 2-channel input makes the
#: Flatten -> Dense permutation of an NHWC framework visible (C, H and W all differ).
#: resnet20 and resnet18 bring strided convolutions, residual blocks with identity and projection shortcuts
#: and (resnet18) a padded, strided max-pool; small inputs keep them quick on CPU.
MODELS = (("osu_cnn", (2, 12, 10), 5), ("tiny_cnn", (1, 8, 8), 3), ("deep_cnn", (3, 8, 8), 4),
          ("resnet20", (3, 16, 16), 5), ("resnet18", (3, 32, 32), 6))
#: the published parameter counts (torchvision's resnet18; ResNet-20 with projection shortcuts), built
#: at the sizes they are quoted for: (model, input shape, classes) -> count
REFERENCE_COUNTS = {("resnet18", (3, 224, 224), 1000): 11_689_512, ("resnet20", (3, 32, 32), 10): 272_474}
#: the "learns" check's model: osu_cnn on 12x12, four classes
LEARNS = ("osu_cnn", (1, 12, 12), 4)
#: the step-timing check's workload. Measured on this 2-core machine at batch 128, one thread: a step takes 64 ms
#: (TensorFlow) to 341 ms (JAX), and the first read after it waits at most 13 ms more than an idle read (a read's
#: own noise; 0.3-9 ms for JAX, MXNet and TensorFlow); a step that queues its work (broken/lazy_step.py) returns
#: in 0.1 ms and leaves 120 ms to the read. At batch 64 TensorFlow's 42 ms step was within 10x of its read noise.
TIMING = ("osu_cnn", (1, 28, 28), 10)
TIMING_BATCH = 128
#: the failing-step check's workload: osu_cnn's first activation at this batch is 2.0 GB, eight times the
#: memory the step is allowed beyond what the process holds after building (FAILING_STEP_HEADROOM_MIB)
FAILING_STEP = ("osu_cnn", (1, 28, 28), 10)
FAILING_STEP_BATCH = 20_000
FAILING_STEP_HEADROOM_MIB = 256
#: the flat-gradient check's models: deep_cnn has BatchNorm (batch statistics in the gradient, running ones that
#: must not move), osu_cnn a Flatten -> Dense whose kernel an NHWC framework must permute back
GRADIENT_MODELS = ("deep_cnn", "osu_cnn")
#: the batch-size change check (issue 52): tiny_cnn (BatchNorm: its statistics carry over the change) trains
#: BATCH_CHANGE_STEPS[0] steps at batch BATCH_CHANGE_SIZES[0], then a new learning rate and BATCH_CHANGE_STEPS[1]
#: steps at batch BATCH_CHANGE_SIZES[1], each batch the next slice of one sample stream, once per run below: name ->
#: (optimizer, momentum, rate before, rate after). With momentum the new rate applies to the whole momentum buffer
#: at once, PyTorch's form (b = m b + g; w -= lr b): Keras' and MXNet's own velocity (v = m v - lr g; w += v) would
#: keep the old rate in it, and their adapters rescale it (docs/adapters.md, "Learning-rate changes"). The rate
#: quadruples there so that a velocity that kept the old rate misses by far more than the tolerance.
BATCH_CHANGE_MODEL = "tiny_cnn"
BATCH_CHANGE_SIZES = (8, 16)
BATCH_CHANGE_STEPS = (2, 2)
BATCH_CHANGE_RUNS: dict[str, tuple[str, float, float, float]] = {
    "adam": ("adam", 0.0, 0.001, 0.003),
    "sgd": ("sgd", 0.0, 0.05, 0.1),
    "sgd_momentum": ("sgd", 0.9, 0.05, 0.2),
}
#: the run whose every step is also checked against the momentum rule in NumPy, from the gradients the adapter's
#: flat_gradient gives before each step (where it has that capability: every built-in does)
BATCH_CHANGE_RULE_RUN = "sgd_momentum"

@dataclass(frozen=True)
class Check:
    """One probe check: its record's key, the ``Probe`` method that runs it, what it builds and needs."""

    name: str
    method: str
    arg: str = ""
    builds: tuple[ModelDescription, ...] = ()  # its layer hooks are needed
    needs: tuple[str, ...] = ()  # other capabilities (adapters.base.CAPABILITIES names)
    #: run in a process of its own (it may end the process), not in the probe that runs the others
    alone: bool = False

    def capabilities(self) -> tuple[str, ...]:
        """Every capability the check needs: the layer hooks of what it builds, then ``needs``."""
        hooks = sorted({h for desc in self.builds for h in layer_hooks(desc.layers)})
        return (*hooks, *self.needs)


def layer_hooks(layers: tuple[Layer, ...]) -> set[str]:
    """The build hooks ``layers`` call, those inside residual blocks included."""
    found: set[str] = set()
    for layer in layers:
        found.add(layer_hook_name(layer))
        if isinstance(layer, Residual):
            found |= layer_hooks(layer.body) | layer_hooks(layer.shortcut)
    return found


def _desc(model: str, shape: tuple[int, int, int], classes: int) -> ModelDescription:
    return build_description(model, shape, classes)


_BY_MODEL = {m: _desc(m, s, c) for m, s, c in MODELS}
_ISOLATED = tuple(ISOLATED.values())

CHECKS: tuple[Check, ...] = (
    *(Check(f"model/{m}", "model", m, builds=(_BY_MODEL[m],)) for m, _, _ in MODELS),
    Check("adam", "adam", builds=(_BY_MODEL["tiny_cnn"],)),
    *(Check(f"reference_count/{m}", "reference_count", m, builds=(_desc(m, s, c),))
      for (m, s, c) in REFERENCE_COUNTS),
    Check("isolated", "isolated", builds=_ISOLATED),
    Check("batchnorm", "batchnorm", builds=(_BY_MODEL["deep_cnn"],), needs=("batchnorm_state",)),
    Check("after_training", "after_training", builds=(_BY_MODEL["tiny_cnn"],)),
    Check("learns", "learns", builds=(_desc(*LEARNS),)),
    Check("evaluates", "evaluates", builds=(_BY_MODEL["tiny_cnn"],)),
    Check("step_timing", "step_timing", builds=(_desc(*TIMING),)),
    Check("queued_steps", "queued_steps", builds=(_desc(*TIMING),), needs=("queued_steps",)),
    Check("failing_step", "failing_step", builds=(_desc(*FAILING_STEP),), alone=True),
    Check("oom", "oom", needs=("oom_examples",)),
    Check("accumulation", "accumulation", builds=(ACCUMULATION_MODEL,), needs=("accumulation",)),
    Check("flat_gradient", "flat_gradient", builds=tuple(_BY_MODEL[m] for m in GRADIENT_MODELS),
          needs=("flat_gradient",)),
    Check("batch_change", "batch_change", builds=(_BY_MODEL[BATCH_CHANGE_MODEL],), needs=("lr_change",)),
)
BY_NAME = {c.name: c for c in CHECKS}
#: the checks the shared probe runs, in order (the others run in a process each)
SHARED = tuple(c.name for c in CHECKS if not c.alone)


def missing_for(cls: type[Adapter], check: str) -> tuple[str, ...]:
    """The capabilities ``check`` needs that ``cls`` lacks (empty: it has them all)."""
    return missing_capabilities(cls, BY_NAME[check].capabilities())


def runs_without(missing: tuple[str, ...]) -> bool:
    """Whether a check is still tried when these capabilities are missing: only layer hooks, which an adapter
    with its own ``build()`` may build without a hook (the attempt tells); any other missing capability is the
    base class's default, which has nothing to show."""
    return all(m.startswith("layer_") for m in missing)
