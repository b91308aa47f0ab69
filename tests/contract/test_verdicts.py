"""The contract's judgements on made-up probe records: each can fail, and says what it found (no framework).

The records are what ``probe.py`` writes; the real frameworks' records are judged in ``test_contract.py``, and
deliberately broken adapters in ``test_broken_adapters.py``.
"""

from __future__ import annotations

import numpy as np

from tests.contract import verdicts
from tests.contract.checks import BY_NAME, missing_for, runs_without
from tests.fakes.adapter import FakeAdapter


def _timing(call_ms: list[float], first_ms: list[float], idle_ms: list[float]) -> dict[str, object]:
    return {"call_s": [v / 1e3 for v in call_ms], "first_read_s": [v / 1e3 for v in first_ms],
            "idle_read_s": [v / 1e3 for v in idle_ms], "weights_changed": True}


def test_a_step_that_waits_passes_even_with_one_slow_read():
    # PyTorch's measured shape: 57 ms inside the step, reads of 2-3 ms; one read held up for 200 ms by the machine
    record = _timing([57, 60, 55, 58, 61], [2.8, 200.0, 2.7, 3.0, 2.9], [2.4, 2.5, 2.3, 2.6, 2.4])
    assert verdicts.step_waits(record, "torch") is None


def test_a_step_that_returns_early_is_named_with_the_frameworks_wait():
    record = _timing([0.1, 0.2, 0.1, 60.0, 0.1], [57, 58, 56, 2.5, 59], [2.4, 2.5, 2.3, 2.6, 2.4])
    message = verdicts.step_waits(record, "jax")
    assert message is not None and "returns before its work is done" in message
    assert "jax.block_until_ready" in message
    unknown = verdicts.step_waits(record, "myfw")
    assert unknown is not None and "the framework's own wait for queued work" in unknown


def test_a_step_that_changes_nothing_is_named():
    record = {**_timing([50] * 5, [2] * 5, [2] * 5), "weights_changed": False}
    assert "does not apply the update" in (verdicts.step_waits(record) or "")


def test_a_failing_step_must_fail_inside_train_step():
    assert verdicts.failing_step({"outcome": "raised"}) is None
    assert verdicts.failing_step({"outcome": "died_in_step"}) is None
    late = verdicts.failing_step({"outcome": "read_raised", "exception": "XlaRuntimeError: Out of memory",
                                  "returned_s": 0.003}, "jax")
    assert late is not None and "returned before its work was done" in late and "jax.block_until_ready" in late
    assert "3 ms" in late and "XlaRuntimeError" in late
    died = verdicts.failing_step({"outcome": "died_in_read", "returned_s": 0.001}, "torch")
    assert died is not None and "the process died while reading" in died
    fits = verdicts.failing_step({"outcome": "read_ok", "batch": 20000})
    assert fits is not None and "could not make its work fail" in fits


def _accumulation_arrays(applied_shift: float = 0.0, held_shift: float = 0.0) -> dict[str, np.ndarray]:
    init = np.ones((3, 2), np.float32)
    whole = init - 0.1
    return {"accumulation/0/init": init, "accumulation/0/held": init + held_shift,
            "accumulation/0/applied": whole + applied_shift, "accumulation/0/whole": whole}


def test_accumulation_equals_one_step_or_says_what_differs():
    record = {"weights": 1, "declared": True}
    assert verdicts.accumulation(_accumulation_arrays(), record) is None
    assert "changed during accumulate_gradients()" in (verdicts.accumulation(_accumulation_arrays(held_shift=0.1),
                                                                            record) or "")
    assert "differs from one train_step" in (verdicts.accumulation(_accumulation_arrays(applied_shift=0.05),
                                                                   record) or "")
    assert "set supports_accumulation = True" in (verdicts.accumulation(_accumulation_arrays(),
                                                                        {**record, "declared": False}) or "")


def test_a_plugin_lacking_a_capability_is_told_what_to_add():
    record = {"missing": ["layer_residual"], "ran": True,
              "error": "Traceback ...\nValueError: weight shape (16, 16, 3, 3) does not fit (10, 64)\n"}
    kind, message = verdicts.capability_verdict(record, False, "pytorch_v1", "model/resnet20") or ("", "")
    assert kind == "unsupported" and message.startswith("not supported: needs `layer_residual`")
    assert "layer_residual hook" in message and "tried anyway: ValueError: weight shape" in message


def test_a_plugin_that_builds_the_layer_in_its_own_build_is_judged_on_its_merits():
    assert verdicts.capability_verdict({"missing": ["layer_residual"], "ran": True, "error": None},
                                       False, "ownbuild", "model/resnet20") is None


def test_a_builtin_lacking_a_required_capability_fails_and_a_feature_it_lacks_is_unsupported():
    kind, message = verdicts.capability_verdict({"missing": ["batchnorm_state"], "ran": False, "error": None},
                                                True, "jax", "batchnorm") or ("", "")
    assert kind == "fail" and "built-in adapter jax lacks `batchnorm_state`" in message
    kind, message = verdicts.capability_verdict({"missing": ["accumulation"], "ran": False, "error": None},
                                                True, "jax", "accumulation") or ("", "")
    assert kind == "unsupported" and "accumulate_gradients" in message


def test_what_each_check_needs_comes_from_the_models_it_builds():
    assert "layer_residual" in BY_NAME["model/resnet20"].capabilities()
    assert "layer_residual" not in BY_NAME["model/deep_cnn"].capabilities()
    assert BY_NAME["batchnorm"].capabilities()[-1] == "batchnorm_state"
    # the fake builds in its own build(), so it has no layer hooks: resnet20 needs six it lacks
    assert missing_for(FakeAdapter, "model/resnet20") == ("layer_batchnorm", "layer_conv2d", "layer_dense",
                                                          "layer_globalavgpool", "layer_relu", "layer_residual")
    assert runs_without(("layer_residual",)) and not runs_without(("layer_residual", "batchnorm_state"))


def _gradient_record(**change: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """A flat-gradient probe record as a correct adapter leaves it (one model), with ``change`` replacing arrays."""
    rng = np.random.default_rng(3)
    w0, g0, g1 = rng.normal(size=30), rng.normal(size=30), rng.normal(size=30)
    w1 = w0 - 0.05 * g0
    logits = rng.normal(size=(8, 4)).astype(np.float32)
    a = {"g0": g0, "g1": g1, "g1_again": g1.copy(), "w0": w0, "w1": w1, "w1_held": w1.copy(),
         "logits_before": logits, "logits_after": logits.copy(), "w2_with": w1 - 0.1, "w2_without": w1 - 0.1}
    a.update(change)
    return {f"grad/m/{k}": v for k, v in a.items()}, {"lr": 0.05, "models": ["m"], "m/dtype": "float64"}


def test_a_correct_flat_gradient_passes_and_each_defect_is_named():
    arrays, record = _gradient_record()
    assert verdicts.flat_gradient(arrays, record, dict(arrays)) is None
    w1 = arrays["grad/m/w1"]
    cases = {
        "weights changed during flat_gradient": _gradient_record(w1_held=w1 + 1e-3),
        "moved BatchNorm's running statistics": _gradient_record(
            logits_after=arrays["grad/m/logits_before"] + 0.01),
        "changed the optimizer state": _gradient_record(w2_with=arrays["grad/m/w2_without"] + 1e-3),
        "not what the first SGD step subtracted": _gradient_record(g0=arrays["grad/m/g0"][::-1].copy()),
    }
    for expected, (bad_arrays, bad_record) in cases.items():
        message = verdicts.flat_gradient(bad_arrays, bad_record)
        assert message is not None and expected in message, (expected, message)
    ref = dict(arrays)
    ref["grad/m/g1"] = arrays["grad/m/g1"] * 1.01  # 1 %: past the 0.1 % tolerance
    message = verdicts.flat_gradient(arrays, record, ref)
    assert message is not None and "differs from the reference" in message
    message = verdicts.flat_gradient(arrays, {**record, "m/dtype": "float32"})
    assert message is not None and "float64" in message


def _queued(waited: list[np.ndarray], queued: list[np.ndarray], wait_ms: list[float], first_ms: list[float],
            idle_ms: list[float]) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    arrays = {}
    for i, (a, b) in enumerate(zip(waited, queued, strict=True)):
        arrays[f"queued_steps/{i}/waited"], arrays[f"queued_steps/{i}/queued"] = a, b
    record = {"weights": len(waited), "steps": 3, "wait_s": [v / 1e3 for v in wait_ms],
              "first_read_s": [v / 1e3 for v in first_ms], "idle_read_s": [v / 1e3 for v in idle_ms]}
    return arrays, record


def test_queued_steps_must_train_the_same_weights_and_their_wait_must_wait():
    w = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]
    # MXNet's shape: two steps of ~60 ms done inside the wait, reads of ~1 ms after it
    good = _queued(w, [a.copy() for a in w], [120, 118, 125, 121, 119], [1.1, 1.0, 1.2, 1.0, 1.1], [1.0] * 5)
    assert verdicts.queued_steps(*good) is None
    off = [w[0], w[1] + np.float32(1e-7)]  # one ulp-sized difference is a different step
    message = verdicts.queued_steps(*_queued(w, off, [120] * 5, [1.0] * 5, [1.0] * 5))
    assert message is not None and "weight 1 after 3 steps queued" in message
    early = _queued(w, w, [0.1, 0.1, 0.2, 0.1, 120], [119, 121, 118, 1.0, 120], [1.0] * 5)
    message = verdicts.queued_steps(*early)
    assert message is not None and "wait_steps() returns before the queued steps are done" in message


def test_the_queued_steps_check_needs_the_capability_and_tells_a_plugin_without_it_what_to_add():
    assert "queued_steps" in missing_for(FakeAdapter, "queued_steps")
    verdict = verdicts.capability_verdict({"missing": ["queued_steps"]}, False, "fake", "queued_steps")
    kind, message = verdict or ("", "")
    assert kind == "unsupported" and "train_step_queued(batch)" in message and "wait_steps()" in message


def test_the_batch_change_verdict_finds_a_step_that_differs_and_a_rate_change_that_did_nothing():
    from tests.contract.verdicts import batch_change

    runs = ("adam", "sgd", "sgd_momentum")
    record = {"sizes": [8, 8, 16, 16], "steps": 4, "runs": list(runs), "rule": "",
              "rates": {"adam": [0.001, 0.003], "sgd": [0.05, 0.1], "sgd_momentum": [0.05, 0.2]},
              "momentum": {"adam": 0.0, "sgd": 0.0, "sgd_momentum": 0.9}}
    ref = {f"batch_change/{o}/step{i}/{w}": np.full(3, float(i) + (o == "adam_same_rate"), np.float32)
           for o in (*runs, "adam_same_rate") for i in range(4) for w in ("w0", "bn0/mean", "bn0/var")}
    assert batch_change(dict(ref), ref, record) is None
    off = dict(ref) | {"batch_change/sgd/step2/w0": ref["batch_change/sgd/step2/w0"] + 0.01}
    assert "sgd, step 2 (after the change to batch 16 at lr 0.1): w0 differs" in str(batch_change(off, ref, record))
    off = dict(ref) | {"batch_change/sgd_momentum/step3/w0": ref["batch_change/sgd_momentum/step3/w0"] + 0.01}
    assert "sgd_momentum, step 3 (after the change to batch 16 at lr 0.2): w0 differs" in str(
        batch_change(off, ref, record))
    biased = dict(ref) | {"batch_change/adam/step1/bn0/var": ref["batch_change/adam/step1/bn0/var"] * 2}
    assert batch_change(biased, ref, record) is None  # the variance's estimator is the batchnorm case's to judge
    same = {k: (ref[k.replace("/adam_same_rate/", "/adam/")] if "/adam_same_rate/" in k else v) for k, v in ref.items()}
    assert "changed nothing" in str(batch_change(same, same, record))


def _momentum_run(rescale: bool, lr: tuple[float, float] = (0.05, 0.2), m: float = 0.9) -> dict[str, np.ndarray]:
    """The batch-change case's momentum run as Keras' velocity would train it (v = m v - lr g; w += v), its velocity
    rescaled by new/old at the change or not, with the gradients before each step recorded as the probe does."""
    rng = np.random.default_rng(0)
    w, v = rng.normal(size=5), np.zeros(5)
    arrays = {"batch_change/sgd_momentum/init": w.copy()}
    for step in range(4):
        if step == 2 and rescale:
            v *= lr[1] / lr[0]
        g = rng.normal(size=5)
        v = m * v - (lr[0] if step < 2 else lr[1]) * g
        w = w + v
        arrays |= {f"batch_change/sgd_momentum/step{step}/grad": g,
                   f"batch_change/sgd_momentum/step{step}/w0": w[:2].astype(np.float32),
                   f"batch_change/sgd_momentum/step{step}/w1": w[2:].astype(np.float32)}
    return arrays


def test_the_momentum_rule_takes_a_rescaled_velocity_and_names_one_that_kept_the_old_rate():
    """A velocity with the rate inside it equals -lr b for PyTorch's buffer b only if it is rescaled at the change:
    rescaled, every step is the rule's; not, the first step after the change is named with its cause."""
    from tests.contract.verdicts import momentum_rule

    record = {"sizes": [8, 8, 16, 16], "steps": 4, "rule": "sgd_momentum",
              "rates": {"sgd_momentum": [0.05, 0.2]}, "momentum": {"sgd_momentum": 0.9}}
    assert momentum_rule(_momentum_run(rescale=True), record) is None
    message = str(momentum_rule(_momentum_run(rescale=False), record))
    assert "step 2, the first after set_learning_rate(0.2)" in message, message
    assert "kept the old rate" in message and "scale such a velocity by new/old" in message, message
    wrong = _momentum_run(rescale=True) | {"batch_change/sgd_momentum/step0/grad": np.zeros(5)}
    message = str(momentum_rule(wrong, record))
    assert "step 0, before the change from lr 0.05 to 0.2" in message and "is not -lr (m b + g)" in message, message
