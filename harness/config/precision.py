"""Training precisions and GPU math modes: their names, what each one computes in, and the checks that a trial
really ran them.

A precision is asked for in an experiment (``precision = "bf16"``), refused in the parent where an adapter
would not apply it on the trial's device (:meth:`adapters.base.Adapter.validate_precision`), and proven in
the worker: the adapter reports the dtype its training forward pass computed in, and a trial whose observed
dtype is not the requested precision's fails (:func:`check_observed`) instead of being stored as if it ran.
See docs/precision.md.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from harness.config.choices import MATH_MODES as MATH_MODES  # re-exported: the Literal is defined there
from harness.config.choices import PRECISIONS as PRECISIONS  # re-exported: the Literal is defined there
from harness.errors import ConfigError

# fp32: float32 throughout. amp: float16 autocast with dynamic loss scaling (a GPU's float16 units).
# bf16: bfloat16 mixed precision: matmuls and convolutions in bfloat16, weights and their update in float32,
# no loss scaling (bfloat16 has float32's exponent range).

#: the dtype the layers' activations are computed in under each precision (the weights stay float32)
COMPUTE_DTYPES = {"fp32": "float32", "amp": "float16", "bf16": "bfloat16"}

#: what each precision means, in words for messages and docs
DESCRIPTIONS = {
    "fp32": "float32 throughout",
    "amp": "float16 mixed precision with loss scaling",
    "bf16": "bfloat16 mixed precision (float32 weights)",
}


class Worded(str):
    """A value :func:`setting` prints as it is (already quoted or listed), e.g. ``Worded("one of 'a', 'b'")``."""


#: how the refusals below name a setting the user can change: the experiment file's key (``precision = 'bf16'``),
#: or, inside :func:`as_flags`, the command line's flag (``--precision 'bf16'``)
_AS_FLAGS: contextvars.ContextVar[bool] = contextvars.ContextVar("batchscope_settings_as_flags", default=False)


@contextmanager
def as_flags() -> Iterator[None]:
    """Within it, :func:`setting` and :func:`set_setting` name command-line flags (``batchscope maxbatch``'s
    refusals), not experiment keys: the words the user types where the setting was given."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)


def setting(key: str, value: object = None) -> str:
    """``precision = 'bf16'`` (an experiment's key), or ``--precision 'bf16'`` inside :func:`as_flags`; without a
    value, the key or flag alone. A plain string ``value`` is taken as already worded (``one of 'a', 'b'``)."""
    name = "--" + key.replace("_", "-") if _AS_FLAGS.get() else key
    if value is None:
        return name
    said = value if isinstance(value, Worded) else repr(value)
    return f"{name} {said}" if _AS_FLAGS.get() else f"{name} = {said}"


def set_setting(key: str, value: object) -> str:
    """The advice to change a setting: ``set precision = 'fp32'``, or ``use --precision 'fp32'``."""
    return ("use " if _AS_FLAGS.get() else "set ") + setting(key, value)


def check_observed(precision: str, framework: str, compute_dtype: str | None, loss_scale: float | None) -> None:
    """Refuse a trial whose training forward pass did not compute in ``precision``'s dtype.

    ``compute_dtype`` is what the adapter saw (the dtype of the last layer's output before any cast back to
    float32), never the request echoed back; None: the adapter does not report it, which is accepted for
    fp32 only (a third-party adapter that runs fp32 needs no change). ``amp`` also needs a loss scale: float16
    without loss scaling is not what ``amp`` promises.
    """
    want = COMPUTE_DTYPES.get(precision)
    if want is None:
        raise ConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if compute_dtype is None:
        if precision == "fp32":
            return
        raise ConfigError(f"precision = {precision!r} was asked for, but the {framework} adapter does not report "
                          "the dtype its training forward pass computed in, so it cannot be shown to have run; "
                          "use precision = 'fp32' for this adapter")
    if compute_dtype != want:
        raise ConfigError(f"precision = {precision!r} was asked for ({DESCRIPTIONS[precision]}: activations in "
                          f"{want}), but the {framework} adapter's training forward pass computed in {compute_dtype}; "
                          f"the setting was not applied, so this trial is not stored as a {precision} run")
    if precision == "amp" and loss_scale is None:
        raise ConfigError(f"precision = 'amp' was asked for, but the {framework} adapter reports no loss scale: "
                          "float16 gradients without loss scaling underflow, and that is not what 'amp' runs")


# ---------------------------------------------------------------------------------------------------- math mode
# What float32 convolutions and matmuls compute in on a GPU (docs/precision.md, "Math mode"). Asked for as
# ``math_mode`` (harness.config.choices.MATH_MODES); each adapter applies it in setup() and reads back what its
# framework will do, which the worker checks (:func:`check_math_mode`) and the store keeps as ``math_mode_seen``.

#: what an adapter may report under ``math_mode`` in its setup facts: ``ieee`` (true float32), ``tf32`` (TensorFloat-32
#: tensor cores for convolutions and matmuls), ``conv-tf32`` / ``matmul-tf32`` (one of the two only: a framework's
#: default), ``n/a`` (not on a GPU: the CPU computes float32 as float32), ``unknown`` (the adapter cannot tell)
MATH_MODES_SEEN = ("ieee", "tf32", "conv-tf32", "matmul-tf32", "n/a", "unknown")
#: the environment variable that makes cuBLAS and cuDNN ignore every TF32 setting when "0" (NVIDIA's backstop)
TF32_OVERRIDE_VAR = "NVIDIA_TF32_OVERRIDE"
#: the lowest CUDA compute capability with TF32 tensor cores (Ampere)
TF32_MIN_CAPABILITY = (8, 0)

_MATH_WORDS = {"ieee": "true float32 (IEEE) in every convolution and matmul",
               "tf32": "TensorFloat-32 tensor cores for float32 convolutions and matmuls",
               "framework-default": "each framework's own default, read back and recorded"}


def legacy_math_mode(device: str) -> str:
    """The math mode a trial stored before ``math_mode`` existed ran under: on the CPU true float32 (``ieee``), on a
    GPU (or under ``auto``) whatever the framework did by default. Keeps such trials' hashes and specs meaning what
    ran (:attr:`harness.config.trial.TrialSpec.trial_hash`)."""
    return "ieee" if device == "cpu" else "framework-default"


def validate_math_mode(mode: str, device: str, framework: str, declared: tuple[str, ...], note: str = "") -> None:
    """Refuse, in the parent, a math mode that ``framework``'s adapter would not apply on ``device``.

    ``declared``: the modes the adapter applies and reads back on a GPU (:attr:`adapters.base.Adapter.math_modes`;
    empty for a plugin written before math modes existed); ``note``: why it lacks the others. ``framework-default``
    is always allowed (nothing is applied; what ran is read back). On the CPU the math mode does not arise
    (``ieee`` is what a CPU computes, recorded as ``n/a``), so ``tf32`` there is refused. Under ``auto`` the trial may
    land on either device, so ``tf32`` is refused there too (like a precision run on one device only); ``ieee`` for
    an adapter that does not declare it is left to the worker, which fails the trial if it lands on a GPU.
    """
    if mode not in MATH_MODES:
        raise ConfigError(f"math_mode {mode!r} is not one of {', '.join(MATH_MODES)}")
    if mode == "framework-default":
        return
    if mode == "tf32" and device != "gpu":
        where = ("on the CPU there are no TF32 tensor cores" if device == "cpu" else
                 f"under {setting('device', 'auto')} the framework picks the device inside the worker, and on the CPU "
                 "there are no TF32 tensor cores")
        raise ConfigError(f"{setting('math_mode', 'tf32')} ({_MATH_WORDS['tf32']}) would not be applied: {where}; "
                          f"{set_setting('device', 'gpu')}, or {setting('math_mode', 'ieee')} or 'framework-default'")
    if device == "gpu" and mode not in declared:
        why = note or "the adapter declares no math modes (adapters.base.Adapter.math_modes)"
        can = ", ".join(repr(m) for m in (*declared, "framework-default"))
        raise ConfigError(f"{setting('math_mode', mode)} ({_MATH_WORDS[mode]}) is not applied by the {framework} "
                          f"adapter on a GPU ({why}), so it would not be what ran; "
                          f"{set_setting('math_mode', Worded('one of ' + can))}")


def check_math_mode(asked: str, framework: str, seen: str | None, on_gpu: bool) -> str:
    """The math mode to record for a trial that asked for ``asked``; refuses one that was not applied.

    ``seen`` is what the adapter read back from its framework in setup() (one of :data:`MATH_MODES_SEEN`), never
    the request echoed back; None: the adapter does not report it (a plugin written before math modes). Off the
    GPU the answer is ``n/a`` (``tf32`` asked there was not applied). On a GPU, ``ieee`` and ``tf32`` must be what
    the framework reports; ``framework-default`` records whatever it reports, ``unknown`` when it reports nothing.
    """
    if asked not in MATH_MODES:
        raise ConfigError(f"math_mode {asked!r} is not one of {', '.join(MATH_MODES)}")
    if not on_gpu:
        if asked == "tf32":
            raise ConfigError(f"math_mode = 'tf32' was asked for, but the {framework} trial runs on the CPU, which "
                              "has no TF32 tensor cores; the setting was not applied, so this trial is not stored")
        return "n/a"
    if seen is None:
        if asked == "framework-default":
            return "unknown"
        raise ConfigError(f"math_mode = {asked!r} was asked for, but the {framework} adapter does not report the math "
                          "mode its framework uses on the GPU, so it cannot be shown to have run; use math_mode = "
                          "'framework-default' for this adapter")
    if seen not in MATH_MODES_SEEN:
        seen = "unknown"
    if asked != "framework-default" and seen != asked:
        hint = (" (this GPU has no TF32 tensor cores: compute capability below 8.0, or NVIDIA_TF32_OVERRIDE=0 in the "
                "environment)" if asked == "tf32" and seen == "ieee" else "")
        raise ConfigError(f"math_mode = {asked!r} was asked for ({_MATH_WORDS[asked]}), but the {framework} adapter "
                          f"reads back {seen!r} from its framework{hint}; the setting was not applied, so this trial "
                          f"is not stored as a {asked} run")
    return seen


def gpu_math_mode(conv_tf32: bool | None, matmul_tf32: bool | None, gpu_has_tf32: bool | None,
                  env: Mapping[str, str], override_covers: bool = True) -> str:
    """What a framework's float32 convolutions and matmuls compute in on its GPU, from its read-back flags.

    ``conv_tf32`` / ``matmul_tf32``: whether the framework allows TF32 there (None: cannot tell); ``gpu_has_tf32``:
    compute capability >= 8.0 (None: unknown); ``env``: the worker's environment, where NVIDIA_TF32_OVERRIDE=0 turns
    TF32 off in cuBLAS and cuDNN whatever the flags say (``override_covers``: the framework's float32 work all goes
    through them; false for XLA, which also generates its own matmul kernels).
    """
    if gpu_has_tf32 is False:
        return "ieee"  # no TF32 units: float32 is computed as float32 whatever the flags allow
    if override_covers and env.get(TF32_OVERRIDE_VAR) == "0":
        return "ieee"
    if conv_tf32 is None or matmul_tf32 is None:
        return "unknown"
    if not conv_tf32 and not matmul_tf32:
        return "ieee"
    if gpu_has_tf32 is None:
        return "unknown"
    return "tf32" if conv_tf32 and matmul_tf32 else "conv-tf32" if conv_tf32 else "matmul-tf32"
