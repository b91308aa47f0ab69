"""The contract's judgements, as pure functions of probe results: ``None`` when the check passes, else a message.

Each message says what was seen and what to look at, because the reader is an adapter's author whose
numbers disagree with the reference's. ``test_contract.py`` asserts that every verdict is ``None`` for the
adapters it checks; ``test_broken_adapters.py`` asserts that each deliberately broken adapter gets the
verdict aimed at its defect. Framework-free: NumPy and :mod:`harness.models` only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.models import BatchNorm, Dense, Flatten, GlobalAvgPool, ModelDescription

# float32 kernels differ between frameworks (summation order, oneDNN vs Eigen vs XLA): first-batch logits
# agree to about 1e-6 relative; after three SGD-momentum steps at lr 0.05 the weights still agree to ~1e-5.
LOGITS_RTOL, LOGITS_ATOL = 1e-4, 1e-4
WEIGHTS_RTOL, WEIGHTS_ATOL = 1e-3, 2e-4
# Running statistics after one step, and logits after three: looser, since they sum over the batch.
STATS_RTOL, STATS_ATOL = 1e-3, 1e-4
AFTER_RTOL, AFTER_ATOL = 2e-3, 2e-3

#: Small models whose logits NumPy computes exactly (see :func:`numpy_logits`): each isolates one layer rule.
ISOLATED = {
    # Flatten of a (C, H, W) input with C, H and W all different, read by a Dense: the row order is visible.
    "flatten_dense": ModelDescription("flatten_dense", (2, 3, 4), 5, (Flatten(), Dense(5))),
    # BatchNorm in inference mode: a fresh layer has running mean 0 and variance 1, so it only scales by
    # 1/sqrt(1 + eps); in training mode it would normalise with the batch's statistics instead.
    "bn_inference": ModelDescription("bn_inference", (3, 2, 2), 4, (BatchNorm(), GlobalAvgPool(), Dense(4))),
}


def _close(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def _worst(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shapes {a.shape} vs {b.shape}"
    diff = np.abs(a.astype(np.float64) - b)
    return f"largest difference {diff.max():.3g} (reference value there {b.flat[int(diff.argmax())]:.3g})"


def numpy_logits(name: str, weights: list[np.ndarray], x: np.ndarray, bn_training: bool = False) -> np.ndarray:
    """Logits of an :data:`ISOLATED` model, in float64; ``bn_training`` gives what a training-mode BN would."""
    x = x.astype(np.float64)
    if name == "flatten_dense":
        kernel, bias = weights
        return x.reshape(len(x), -1) @ kernel + bias  # C-major flatten: the description's order
    gamma, beta, kernel, bias = weights
    eps = BatchNorm().eps
    if bn_training:
        mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    else:
        mean, var = np.zeros(x.shape[1]), np.ones(x.shape[1])
    shape = (1, -1, 1, 1)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + beta.reshape(shape)
    return y.mean(axis=(2, 3)) @ kernel + bias


def isolated_layers(arrays: dict[str, np.ndarray]) -> str | None:
    """Each :data:`ISOLATED` model's logits against NumPy's; a mismatch names the layer rule at fault."""
    for name in ISOLATED:
        x = arrays[f"isolated/{name}/x"]
        weights = [arrays[f"isolated/{name}/w{i}"] for i in range(sum(k.startswith(f"isolated/{name}/w")
                                                                      for k in arrays))]
        got = arrays[f"isolated/{name}/logits"]
        want = numpy_logits(name, weights, x)
        if _close(got, want, LOGITS_RTOL, LOGITS_ATOL):
            continue
        if name == "flatten_dense":
            return ("Flatten -> Dense logits differ from NumPy's x.reshape(N, -1) @ kernel + bias "
                    f"({_worst(got, want)}): the adapter flattens in another order than C-major (C, H, W), or "
                    "does not permute the Dense kernel's rows to its own flatten order (an NHWC framework must; "
                    "see adapters/tensorflow.py, _flatten_dense_converters)")
        if _close(got, numpy_logits(name, weights, x, bn_training=True), LOGITS_RTOL, LOGITS_ATOL):
            return ("predict() normalises with the batch's own mean and variance: BatchNorm runs in training "
                    "mode in predict(). Switch the model to inference mode there (model.eval(), training=False, "
                    "outside autograd.record()) so it uses the running statistics")
        return (f"BatchNorm in inference mode differs from NumPy's (x - running_mean) / sqrt(running_var + eps) "
                f"* gamma + beta with fresh running statistics (0 and 1) ({_worst(got, want)}): check eps, the "
                "initial running statistics and the channel axis")
    return None


def batchnorm_statistics(this: dict[str, Any], ref: dict[str, Any], declared: str) -> str | None:
    """Running mean and variance of every BatchNorm after one step, against the reference adapter's.

    ``this``/``ref`` are the probes' ``batchnorm`` records plus their arrays (``mean``, ``var`` lists).
    The reference (PyTorch) updates the running variance with the unbiased batch variance; an adapter that
    declares ``bn_running_variance = "biased"`` is compared with the reference converted to that.
    """
    for i, (n, m) in enumerate(zip(ref["n"], ref["momentum"], strict=True)):
        mean, ref_mean = this["mean"][i], ref["mean"][i]
        if not _close(mean, ref_mean, STATS_RTOL, STATS_ATOL):
            ratio = float(np.median(mean / np.where(ref_mean == 0, np.nan, ref_mean)))
            if abs(ratio - m / (1 - m)) < 0.05 * m / (1 - m):
                return (f"BatchNorm {i}: running mean after one step is {ratio:.3g}x the reference's, i.e. "
                        f"momentum/(1 - momentum) with momentum {m}: the momentum convention is flipped. The "
                        "description's momentum is the weight of the running statistic (Keras, MXNet); "
                        "PyTorch's momentum argument is 1 - that")
            return (f"BatchNorm {i}: running mean after one step differs from the reference "
                    f"({_worst(mean, ref_mean)}): check the momentum convention and the channel axis")
        batch_var_ref = (ref["var"][i] - m) / (1 - m)  # the unbiased batch variance the reference added
        if declared == "biased":
            batch_var_ref = batch_var_ref * (n - 1) / n
        want = m + (1 - m) * batch_var_ref
        var = this["var"][i]
        if not _close(var, want, STATS_RTOL, STATS_ATOL):
            batch_var = (var - m) / (1 - m)
            ratio = float(np.median(batch_var / batch_var_ref))
            if declared == "unbiased" and abs(ratio - (n - 1) / n) < 0.2 / n:
                return (f"BatchNorm {i}: running variance uses the biased batch variance (ratio {ratio:.4f} = "
                        f"(n-1)/n with n = {n} values per channel) although the adapter declares "
                        "bn_running_variance = 'unbiased': multiply by n/(n-1) before the update, or declare "
                        "'biased' if that is the framework's own rule")
            return (f"BatchNorm {i}: running variance after one step differs from the reference converted to "
                    f"bn_running_variance = {declared!r} ({_worst(var, want)}; batch-variance ratio {ratio:.4f}, "
                    f"n = {n}): check the declaration, the momentum convention and the variance estimator")
    return None


def predictions_after_training(this: np.ndarray, ref: np.ndarray) -> str | None:
    """Inference-mode logits after three training steps, against the reference's."""
    if _close(this, ref, AFTER_RTOL, AFTER_ATOL):
        return None
    return (f"inference-mode logits after 3 training steps differ from the reference ({_worst(this, ref)}): if "
            "first-batch logits and the weights after the steps agree, predict() uses the wrong BatchNorm "
            "statistics (training mode, or running statistics updated wrongly: see the BatchNorm checks)")


def blocking(record: dict[str, Any]) -> str | None:
    """After ``train_step`` returns, nothing may be pending: a forced synchronisation must find no work."""
    if not record["weights_changed"]:
        return "the weights had not changed when train_step returned: the update is not applied (or not yet)"
    steps, calls_s, sync_s, idle_s = record["steps"], record["calls_s"], record["sync_s"], record["idle_read_s"]
    per_step_s = record["synced_step_s"]  # one step followed by a read: what a step really costs
    # Queued work makes the first read wait for it: with `steps` steps queued, about steps * per_step_s.
    if sync_s > 3 * idle_s + 0.5 * per_step_s:
        return (f"{steps} train_step calls returned in {calls_s:.3g} s, but reading the weights right after "
                f"took {sync_s:.3g} s (an idle read takes {idle_s:.3g} s, a step {per_step_s:.3g} s): train_step "
                "returns before the device has finished. Synchronise at the end of train_step "
                "(torch.cuda.synchronize(), jax.block_until_ready(...), mx.nd.waitall(), reading the loss)")
    return None


def oom_classification(record: dict[str, Any]) -> str | None:
    """The adapter's own examples of its framework's out-of-memory errors, and of other errors."""
    if not record["supplied"]:
        return ("the adapter supplies no examples of its framework's real out-of-memory errors: override the "
                "classmethod oom_examples() to return (out-of-memory exceptions, other exceptions) as the "
                "framework raises them (docs/adapters.md, 'Out of memory')")
    missed = [r for r in record["oom_recognised"] if not r[2]]
    wrong = [r for r in record["not_oom_recognised"] if r[2]]
    if missed:
        return (f"is_oom() does not recognise the framework's out-of-memory errors {missed}: match the "
                "framework's exception class and its allocator's message, not only MemoryError")
    if wrong:
        return f"is_oom() takes ordinary errors for out-of-memory: {wrong}"
    return None


def imports_no_framework(module: str, loaded: list[str]) -> str | None:
    """Importing the adapter's module must load no framework (the parent imports it to list adapters)."""
    if not loaded:
        return None
    return (f"importing {module} loaded {', '.join(loaded)}: import the framework inside the adapter's methods "
            "only; the parent imports adapter modules to list them and validate their options")
