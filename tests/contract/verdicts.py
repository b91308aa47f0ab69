"""The contract's judgements, as pure functions of probe results: ``None`` when the check passes, else a message.

Each message says what was seen and what to look at, because the reader is an adapter's author whose
numbers disagree with the reference's. ``test_contract.py`` asserts that every verdict is ``None`` for the
adapters it checks; ``test_broken_adapters.py`` asserts that each deliberately broken adapter gets the
verdict aimed at its defect. Framework-free: NumPy and :mod:`harness.models` only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters.base import CAPABILITIES
from harness.models import BatchNorm, Conv2D, Dense, Flatten, GlobalAvgPool, ModelDescription, ReLU

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
#: The accumulation check's model: no BatchNorm, so two half batches' gradients, each weighted 1/2, are exactly
#: the whole batch's (a BatchNorm would normalise each half with its own statistics).
ACCUMULATION_MODEL = ModelDescription("conv_dense", (2, 6, 6), 3, (Conv2D(4, 3, "same"), ReLU(), Flatten(), Dense(3)))


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
                    "see adapters/tensorflow/convert.py, flatten_dense_converters)")
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


#: how each framework waits for its queued work, named in the messages of the two synchronisation checks
SYNC_CALLS = {
    "jax": "jax.block_until_ready(...) on the new parameters, optimizer state and loss",
    "torch": "torch.cuda.synchronize() on a GPU (or read the loss back with loss.item())",
    "mxnet": "mx.nd.waitall() (or read the loss back with loss.asnumpy())",
    "tensorflow": "reading the loss back (loss.numpy()) at the end of the step",
}
_ANY_SYNC = "the framework's own wait for queued work (its synchronise call, or reading the loss back to the host)"


def _sync_call(import_name: str) -> str:
    return SYNC_CALLS.get(import_name.partition(".")[0], _ANY_SYNC)


def _work_left(record: dict[str, Any], call: str) -> tuple[float, float]:
    """(median seconds of the timed ``call``, median of what the first read after it waited beyond an idle read)."""
    return (float(np.median(record[call])),
            float(np.median(np.subtract(record["first_read_s"], record["idle_read_s"]))))


def step_waits(record: dict[str, Any], import_name: str = "") -> str | None:
    """A step from idle, then the first blocking read: the step's work must be inside the call, not in the read.

    ``record``: the probe's ``step_timing`` lists (seconds). The work left behind is what the first read waits
    beyond an idle read. A step that waits has its whole work inside the call and ~nothing left; one that returns
    early has the reverse, so the medians differ by one to three orders of magnitude either way and a loaded
    machine's hiccups (one slow read among five) move neither median across the line.
    """
    if not record["weights_changed"]:
        return "the weights had not changed after the steps: train_step does not apply the update (or not yet)"
    call_s, left_s = _work_left(record, "call_s")
    if left_s > call_s:
        return (f"train_step returns before its work is done: a step returned in {call_s * 1e3:.3g} ms, and reading "
                f"the weights right after waited {left_s * 1e3:.3g} ms more than an idle read (medians of "
                f"{len(record['call_s'])}). The worker reads its clock when train_step returns, so that work would be "
                f"missing from the step time. End train_step with {_sync_call(import_name)}")
    return None


def queued_steps(arrays: dict[str, np.ndarray], record: dict[str, Any]) -> str | None:
    """Steps queued with ``train_step_queued`` and waited for once train what ``train_step`` trains, bit for bit, and
    ``wait_steps`` returns only once they are done (the first read after it finds nothing left, as in
    :func:`step_waits`: the worker reads its clock when ``wait_steps`` returns)."""
    for i in range(record["weights"]):
        waited, queued = arrays[f"queued_steps/{i}/waited"], arrays[f"queued_steps/{i}/queued"]
        if not np.array_equal(waited, queued):
            return (f"weight {i} after {record['steps']} steps queued with train_step_queued() and one "
                    f"wait_steps() differs from the same steps by train_step() ({_worst(queued, waited)}): a queued "
                    "step must do what train_step does, only without waiting for it")
    wait_s, left_s = _work_left(record, "wait_s")
    if left_s > wait_s:
        return (f"wait_steps() returns before the queued steps are done: it returned in {wait_s * 1e3:.3g} ms, and "
                f"reading the weights right after waited {left_s * 1e3:.3g} ms more than an idle read (medians of "
                f"{len(record['wait_s'])}). The worker reads its clock when wait_steps returns: wait for every queued "
                "step there")
    return None


def failing_step(record: dict[str, Any], import_name: str = "") -> str | None:
    """A step whose work fails must fail inside ``train_step``; ``record`` is read from the progress file.

    ``outcome``: ``raised`` (in the step), ``died_in_step`` (the framework ended the process inside the call),
    ``returned`` then ``read_raised`` or ``died_in_read`` (the failure surfaced only at the next read), or
    ``read_ok`` (nothing failed: the check could not provoke a failure).
    """
    outcome = record["outcome"]
    if outcome in ("raised", "died_in_step"):
        return None
    if outcome in ("read_raised", "died_in_read"):
        where = ("reading the weights after it raised " + record.get("exception", "")
                 if outcome == "read_raised" else "the process died while reading the weights after it")
        return (f"train_step returned before its work was done: a step on a batch that cannot fit under the memory "
                f"limit returned in {record.get('returned_s', float('nan')) * 1e3:.3g} ms without an error, and only "
                f"{where}. A trial would store such a step as ok, at an impossible speed. End train_step with "
                f"{_sync_call(import_name)}, so that its failure is raised inside it")
    return (f"a step on a batch of {record.get('batch', '?')} samples succeeded under a memory limit it cannot fit in "
            "(the probe could not make its work fail): does the framework's allocator ignore RLIMIT_DATA?")


def accumulation(arrays: dict[str, np.ndarray], record: dict[str, Any]) -> str | None:
    """Two half batches accumulated with weight 1/2, then applied, must equal one step on the whole batch."""
    if not record["declared"]:
        return ("accumulate_gradients() and apply_accumulated() are implemented but supports_accumulation is False, "
                "so the parent refuses accumulate_steps > 1 for this adapter: set supports_accumulation = True")
    for i in range(record["weights"]):
        init, held = arrays[f"accumulation/{i}/init"], arrays[f"accumulation/{i}/held"]
        applied, whole = arrays[f"accumulation/{i}/applied"], arrays[f"accumulation/{i}/whole"]
        if not np.array_equal(init, held):
            return (f"weight {i} changed during accumulate_gradients(): it must only add to the accumulated "
                    "gradients; the update happens in apply_accumulated()")
        if not _close(applied, whole, WEIGHTS_RTOL, WEIGHTS_ATOL):
            return (f"weight {i} after accumulating two half batches (weight 0.5 each) and apply_accumulated() differs "
                    f"from one train_step on the whole batch ({_worst(applied, whole)}): add weight x the gradient of "
                    "each micro-batch's mean loss, apply once, then clear the accumulated gradients")
    return None


#: the flat gradient against the reference's: the same float32 kernels as the first-batch logits, summed over
#: the batch (``max|g|`` scales the absolute part: gradients of different layers differ by orders of magnitude)
GRADIENT_RTOL, GRADIENT_ATOL_OF_MAX = 1e-3, 1e-4


def flat_gradient(arrays: dict[str, np.ndarray], record: dict[str, Any],
                  ref: dict[str, np.ndarray] | None = None) -> str | None:
    """``flat_gradient()`` gives the gradient (what the first SGD step subtracts, the reference's), as float64 in
    get_weights' order, and changes nothing: weights, running statistics, optimizer state."""
    lr = float(record["lr"])
    for model in record["models"]:
        a = {k.split("/")[-1]: v for k, v in arrays.items() if k.startswith(f"grad/{model}/")}
        g0, w0 = a["g0"], a["w0"]
        if record.get(f"{model}/dtype") != "float64" or g0.ndim != 1 or g0.shape != w0.shape:
            return (f"{model}: flat_gradient() gave a {record.get(f'{model}/dtype')} array of shape {g0.shape}; it "
                    f"must be one float64 array of every trainable weight's gradient ({w0.size} numbers for "
                    "get_weights()' arrays), flattened and concatenated in get_weights()' order")
        if not np.array_equal(a["w1"], a["w1_held"]):
            return (f"{model}: the weights changed during flat_gradient() ({_worst(a['w1_held'], a['w1'])}): it must "
                    "compute the gradient only, with no optimizer update")
        if not _close(a["logits_after"], a["logits_before"], 1e-6, 1e-6):
            worst = _worst(a["logits_after"], a["logits_before"])
            return (f"{model}: inference-mode logits differ after flat_gradient() ({worst}): its training-mode "
                    "forward moved BatchNorm's running statistics; restore them (or use a forward that does not "
                    "update them)")
        if not _close(a["w2_with"], a["w2_without"], 1e-6, 1e-7):
            return (f"{model}: the step after flat_gradient() differs from the same step without it "
                    f"({_worst(a['w2_with'], a['w2_without'])}): flat_gradient() changed the optimizer state or the "
                    "gradients the next step applies")
        step = (w0 - a["w1"]) / lr  # the first SGD step, with or without momentum, is w - lr * g
        scale = float(np.abs(step).max()) or 1.0
        if not _close(g0, step, GRADIENT_RTOL, GRADIENT_ATOL_OF_MAX * scale):
            return (f"{model}: flat_gradient() at the initial weights is not what the first SGD step subtracted, "
                    f"(w0 - w1) / lr ({_worst(g0, step)}): check the order (get_weights'), the layouts (a transposed "
                    "or permuted kernel must be converted back as get_weights does) and the mean over the batch")
        if not _close(a["g1_again"], a["g1"], 1e-9, 1e-12):
            worst = _worst(a["g1_again"], a["g1"])
            return f"{model}: two calls of flat_gradient() on the same batch disagree ({worst})"
        if ref is not None:
            for key in ("g0", "g1"):
                want = ref[f"grad/{model}/{key}"]
                atol = GRADIENT_ATOL_OF_MAX * float(np.abs(want).max() or 1.0)
                if not _close(a[key], want, GRADIENT_RTOL, atol):
                    return f"{model}: the gradient {key} differs from the reference adapter's ({_worst(a[key], want)})"
    return None


_REQUIRED = {c.name: c.required for c in CAPABILITIES}
#: how every "not supported" message starts (the suite's reporting keys on it)
UNSUPPORTED = "not supported: needs"
#: what to write for each capability, in the "not supported" messages
HOW_TO_ADD = {
    "layer_residual": "a layer_residual hook that builds each path with self.build_layers (docs/adapters.md, "
                      "'Layer hooks')",
    "batchnorm_state": "batchnorm_state() returning each BatchNorm's (running_mean, running_var), in layer order",
    "oom_examples": "the classmethod oom_examples() with the framework's real out-of-memory errors (docs/adapters.md, "
                    "'Out-of-memory examples')",
    "accumulation": "accumulate_gradients(batch, weight) and apply_accumulated(), and supports_accumulation = True",
    "queued_steps": "train_step_queued(batch), which queues a step without waiting for it, and wait_steps() "
                    "(docs/adapters.md, 'Queued steps')",
    "lr_change": "set_learning_rate(lr), which trains the next steps at lr keeping the optimizer state "
                 "(docs/adapters.md, 'Learning-rate changes')",
    "flat_gradient": "flat_gradient(x, y) returning the mean loss's gradient as one float64 array in get_weights' "
                     "order, changing no weights, optimizer state or BatchNorm statistics (docs/noise.md)",
}


def capability_verdict(record: dict[str, Any], builtin: bool, adapter: str, check: str) -> tuple[str, str] | None:
    """Whether a check's record is judged on its merits (None) or answered by what the adapter lacks.

    Returns ("fail", message) for a built-in adapter that lacks a required capability the check needs (every
    built-in must have them all), ("unsupported", message) for an adapter that lacks one and did not manage the
    check anyway (an adapter with its own build() may build a layer without its hook: that is judged on its
    merits). A feature (a capability not required of built-ins, such as accumulation) that a built-in lacks is
    "unsupported" too: the built-in declares it, and the parent refuses the feature for it.
    """
    missing = list(record.get("missing") or ())
    if not missing:
        return None
    required = [m for m in missing if _REQUIRED.get(m, True)]
    if builtin and required:
        return ("fail", f"the built-in adapter {adapter} lacks {', '.join(f'`{m}`' for m in required)}, which the "
                        f"check {check!r} needs: every built-in adapter must have every required capability "
                        "(adapters.base.CAPABILITIES)")
    if record.get("ran") and not record.get("error"):
        return None
    lacks = list(record.get("lacks") or missing)  # narrowed by the probe to what no passing check showed it builds
    how = "; ".join(HOW_TO_ADD.get(m, f"the {m} hook") for m in lacks)
    tried = ""
    if record.get("error"):
        tried = f"; tried anyway: {record['error'].strip().splitlines()[-1][:300]}"
    return ("unsupported", f"{UNSUPPORTED} {', '.join(f'`{m}`' for m in lacks)} ({adapter} has no {', '.join(lacks)}; "
                           f"to add it: {how}){tried}")


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


def batch_change(this: dict[str, np.ndarray], ref: dict[str, np.ndarray], record: dict[str, Any]) -> str | None:
    """A batch-size change mid-training (issue 52): the weights after every step, at one size, then at another under a
    new learning rate, are the reference's step for step (Adam, plain SGD, SGD with momentum), the momentum run's
    steps follow the momentum rule in NumPy where the adapter gave its gradients (:func:`momentum_rule`), the
    BatchNorm running means carry over the change, and the rate change changed the training (against the same steps
    at the first rate)."""
    k = record["sizes"].index(record["sizes"][-1])  # the first step at the second size
    for run in record.get("runs", ("adam", "sgd")):
        if run == record.get("rule"):
            message = momentum_rule(this, record)
            if message is not None:
                return message
        for step in range(record["steps"]):
            where = f"{run}, step {step} ({'after' if step >= k else 'before'} the change to batch " \
                    f"{record['sizes'][-1]} at lr {record['rates'][run][1]})"
            prefix = f"batch_change/{run}/step{step}/"
            keys = sorted(key for key in ref if key.startswith(prefix) and not key.endswith("/grad"))
            if not keys:
                return f"the reference recorded nothing for {prefix}"
            for key in keys:
                if key.endswith("/var"):  # biased or unbiased by declaration: the batchnorm case checks that rule
                    continue
                rtol, atol = (STATS_RTOL, STATS_ATOL) if key.endswith("/mean") else (WEIGHTS_RTOL, WEIGHTS_ATOL)
                if key not in this:
                    return f"{where}: {key.rsplit('/', 1)[-1]} not recorded"
                if not _close(this[key], ref[key], rtol, atol):
                    return f"{where}: {key[len(prefix):]} differs from the reference ({_worst(this[key], ref[key])})"
    changed = [key for key in this if key.startswith(f"batch_change/adam/step{k}/w")
               and not np.array_equal(this[key], this[key.replace("/adam/", "/adam_same_rate/")])]
    if not changed:
        rates = record["rates"]["adam"]
        return (f"set_learning_rate({rates[1]}) changed nothing: the step after it trained the same weights as at lr "
                f"{rates[0]}")
    return None


def _step_weights(arrays: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """The weights recorded under ``prefix`` (``.../w0``, ``.../w1``, ...) as one float64 array, in order."""
    count = sum(1 for key in arrays if key.startswith(prefix + "w"))
    return np.concatenate([np.asarray(arrays[f"{prefix}w{j}"], dtype=np.float64).ravel() for j in range(count)])


def momentum_rule(arrays: dict[str, np.ndarray], record: dict[str, Any]) -> str | None:
    """The momentum run of the batch-change case against SGD momentum written out in NumPy, from the gradients the
    adapter's ``flat_gradient`` gave before each step: ``b = m b + g; w -= lr b``, where ``lr`` is the rate set for
    that step, so that a new rate applies to the whole buffer at once (PyTorch's form; a Keras or MXNet velocity
    ``v = m v - lr g`` equals ``-lr b`` only if it is rescaled by new/old at the change). Each step's update
    ``w_after - w_before`` is checked, so a miss is named at the step it happens."""
    run = record["rule"]
    m, (lr1, lr2) = float(record["momentum"][run]), record["rates"][run]
    k = record["sizes"].index(record["sizes"][-1])
    before = np.asarray(arrays[f"batch_change/{run}/init"], dtype=np.float64)
    buf = np.zeros_like(before)
    for step in range(record["steps"]):
        lr = lr1 if step < k else lr2
        grad = np.asarray(arrays[f"batch_change/{run}/step{step}/grad"], dtype=np.float64)
        after = _step_weights(arrays, f"batch_change/{run}/step{step}/")
        want = -lr * (m * buf + grad)
        got = after - before
        atol = GRADIENT_ATOL_OF_MAX * (float(np.abs(want).max()) or 1.0)
        if not _close(got, want, GRADIENT_RTOL, atol):
            where = (f"{run} (momentum {m}), step {step}, "
                     + (f"the first after set_learning_rate({lr2})" if step == k else
                        f"{'after' if step > k else 'before'} the change from lr {lr1} to {lr2}"))
            if step == k and _close(got, -(lr1 * m * buf + lr * grad), GRADIENT_RTOL, atol):
                return (f"{where}: the update is -(lr_old m b + lr_new g), not -lr_new (m b + g): the momentum "
                        "buffer kept the old rate, as Keras' and MXNet's own velocity (v = m v - lr g) does. A new "
                        "rate must apply to the whole buffer at once: in set_learning_rate, scale such a velocity "
                        "by new/old (docs/adapters.md, 'Learning-rate changes')")
            return (f"{where}: the update w_after - w_before is not -lr (m b + g), b the momentum buffer of the "
                    f"gradients flat_gradient() gave before each step ({_worst(got, want)}): check how "
                    "set_learning_rate treats the momentum state (docs/adapters.md, 'Learning-rate changes')")
        buf, before = m * buf + grad, after
    return None
