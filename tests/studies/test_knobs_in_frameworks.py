"""Augmentation and gradient accumulation in the real frameworks: tests that fail if a knob is ignored.

Each framework runs in a process of its own (a real worker, or a snippet interpreter), as in production.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.records import TrialUnit
from harness.registry import adapter_class
from harness.run.executor import LocalExecutor
from tests.conftest import make_trial
from tests.fakes.recording import TARGETS
from tests.helpers.envs import python_for
from tests.helpers.snippet import run_snippet

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")


def _run_recorded(framework: str, data, tmp_path: Path, **trial_changes) -> tuple[dict, list[str]]:
    record = tmp_path / f"{framework}-{len(list(tmp_path.iterdir()))}.txt"
    # a generous timeout: on a loaded 2-core machine TensorFlow's import alone took ~50 s
    trial = make_trial(framework, batch_size=8, epochs=2, warmup_steps=1, timed_steps=2, eval=False,
                       model="osu_cnn", timeout_s=900.0, **trial_changes)
    unit = TrialUnit(trial=trial, data=data, order_path=str(data.write_order(trial.seed, trial.epochs)),
                     adapter_target=TARGETS[framework], oom_patterns=adapter_class(framework).oom_stderr_patterns,
                     python=python_for(TARGETS[framework]),
                     env={"BATCHSCOPE_RECORD": str(record)})
    outcome = LocalExecutor(log_dir=tmp_path / "logs").run(unit)
    assert outcome.status == "ok", outcome.reason + outcome.traceback
    return outcome.metrics, record.read_text().splitlines()


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    from harness.data import DataRequest, prepare

    return prepare(DataRequest(name="synthetic", synthetic_shape=(1, 12, 12), synthetic_classes=3,
                               synthetic_samples=32), tmp_path_factory.mktemp("cache"))


@pytest.mark.slow
def test_augmentation_changes_the_pixels_every_framework_trains_on_identically(image_data, tmp_path):
    seen = {fw: _run_recorded(fw, image_data, tmp_path, augment="crop_flip", augment_pad_px=2)[1]
            for fw in FRAMEWORKS}
    plain = _run_recorded("pytorch", image_data, tmp_path)[1]
    assert len(plain) == 2 * 4  # 2 epochs of 32 samples in batches of 8
    assert seen["pytorch"] == seen["tensorflow"] == seen["mxnet"]  # the same pixels, batch by batch
    changed = [a != b for a, b in zip(seen["pytorch"], plain, strict=True)]
    assert all(changed), "augmentation left some batch as it was"
    assert seen["pytorch"][:4] != seen["pytorch"][4:]  # a new draw each epoch


@pytest.mark.slow
def test_accumulation_runs_k_micro_batches_per_update_in_the_worker(image_data, tmp_path):
    plain, batches = _run_recorded("pytorch", image_data, tmp_path)
    acc, micro = _run_recorded("pytorch", image_data, tmp_path, accumulate_steps=2)
    assert plain.optimizer_updates_n == 8 and acc.optimizer_updates_n == 4  # 2 epochs x 32 / (8 x 2)
    assert acc.micro_batches_n == len(micro) == len(batches) == 8
    assert all(line.startswith("8 ") for line in micro)  # only the micro-batch is handed over at once


ACCUMULATION_SNIPPET = """
import json
import numpy as np
from adapters.base import RuntimeConfig, softmax_cross_entropy
from harness.config.trial import OptimizerSpec
from harness.models import build_description, init_weights
from harness.registry import adapter_class

FW, B, K, UPDATES = {fw!r}, 4, 3, 4
rng = np.random.default_rng(0)
x = rng.standard_normal((B * K * UPDATES, 1, 8, 8)).astype(np.float32)
y = rng.integers(0, 3, len(x))
xe, ye = rng.standard_normal((64, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 64)

def make():
    a = adapter_class(FW)()
    a.setup(RuntimeConfig(device="cpu", threads=1))
    desc = build_description("osu_cnn", (1, 8, 8), 3)
    a.build(desc, init_weights(desc, 0), OptimizerSpec(name="sgd", lr=0.1, momentum=0.9))
    return a

def loss(a):
    return softmax_cross_entropy(a.predict(a.prepare_batch(xe, ye)), ye)[0] / len(ye)

def run(mode):
    a, curve, held = make(), [], []
    for u in range(UPDATES):
        idx = np.arange(u * B * K, (u + 1) * B * K)
        if mode == "big":  # one step of B*K
            a.train_step(a.prepare_batch(x[idx], y[idx]))
        elif mode == "small":  # K plain steps of B: what ignoring accumulate_steps would do
            for j in range(K):
                part = idx[j * B:(j + 1) * B]
                a.train_step(a.prepare_batch(x[part], y[part]))
        else:
            before = a.get_weights()
            for j in range(K):
                part = idx[j * B:(j + 1) * B]
                a.accumulate_gradients(a.prepare_batch(x[part], y[part]), len(part) / len(idx))
            held.append(all(np.array_equal(p, q) for p, q in zip(before, a.get_weights())))
            a.apply_accumulated()
        curve.append(loss(a))
    return curve, a.get_weights(), held

big, w_big, _ = run("big")
small, _, _ = run("small")
acc, w_acc, held = run("accumulate")
print(json.dumps({{"big": big, "small": small, "acc": acc, "held": held,
                  "w_diff": max(float(np.abs(p - q).max()) for p, q in zip(w_big, w_acc))}}))
"""

#: float32 sums in another order (k partial gradients instead of one reduction): measured differences are
#: ~1e-7 relative in the loss; 1e-4 leaves room and is far below what ignoring the knob does (~1e-2).
LOSS_RTOL = 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_accumulated_updates_follow_the_big_batch_loss_curve(framework):
    out = run_snippet(ACCUMULATION_SNIPPET.format(fw=framework), framework=framework)
    assert out["held"] == [True] * 4  # no weight moved before apply_accumulated: one update per K micro-batches
    assert out["acc"] == pytest.approx(out["big"], rel=LOSS_RTOL)
    assert out["w_diff"] < 1e-4
    # the test can tell: K plain steps of B (the knob ignored) leave the big-batch curve by far more
    assert max(abs(s - b) / b for s, b in zip(out["small"], out["big"], strict=True)) > 20 * LOSS_RTOL


def test_trial_spec_round_trips_the_study_fields():
    from harness.config.trial import TrialSpec

    t = dataclasses.replace(make_trial(), variant="adam", augment="crop", augment_pad_px=2, accumulate_steps=3)
    assert TrialSpec.from_dict(t.to_dict()) == t and t.effective_batch_size == 12
