"""Training precisions: their names, what each one computes in, and the check that a trial really ran it.

A precision is asked for in an experiment (``precision = "bf16"``), refused in the parent where an adapter
would not apply it on the trial's device (:meth:`adapters.base.Adapter.validate_precision`), and proven in
the worker: the adapter reports the dtype its training forward pass computed in, and a trial whose observed
dtype is not the requested precision's fails (:func:`check_observed`) instead of being stored as if it ran.
See docs/precision.md.
"""

from __future__ import annotations

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
