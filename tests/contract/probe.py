"""The contract checks that need a framework, run in a subprocess of their own: one framework per process.

``python -m tests.contract.probe --target module:Class --out DIR`` loads one adapter, exercises it on
CPU and writes ``DIR/result.json`` (facts and per-check outcomes) and ``DIR/reference.npz`` (logits and
weights that the parent compares across frameworks). The pytest process never imports a framework: it
only reads these files and judges them (``verdicts.py``, ``test_contract.py``). A check that raises is
recorded with its traceback, so one broken check does not hide the others.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import Adapter, OptimizerSpec, RuntimeConfig
from harness.models import BatchNorm, build_description, init_weights
from tests.contract.verdicts import ISOLATED

#: (model, input shape, classes): every layer kind; osu_cnn on a non-square 2-channel input makes the
#: Flatten -> Dense permutation of an NHWC framework visible (C, H and W all differ).
#: resnet20 and resnet18 bring strided convolutions, residual blocks with identity and projection shortcuts
#: and (resnet18) a padded, strided max-pool; small inputs keep them quick on CPU.
MODELS = (("osu_cnn", (2, 12, 10), 5), ("tiny_cnn", (1, 8, 8), 3), ("deep_cnn", (3, 8, 8), 4),
          ("resnet20", (3, 16, 16), 5), ("resnet18", (3, 32, 32), 6))
#: SGD steps before the weights are compared. ResNet-18 gets one: its last stage is 1x1 at 32x32 input, so
#: batch norm there normalises 8 numbers, and with lr 0.05 and momentum 0.9 the frameworks' float rounding
#: (logits agree to 5e-6) grows past 1e-3 by the third step (measured: MXNet 15x the tolerance, 2x at 64x64
#: input). One step still checks the backward pass of every layer against the reference.
STEPS_FOR = {"resnet18": 1}
#: the published parameter counts (torchvision's resnet18; ResNet-20 with projection shortcuts), built
#: at the sizes they are quoted for: (model, input shape, classes) -> count
REFERENCE_COUNTS = {("resnet18", (3, 224, 224), 1000): 11_689_512, ("resnet20", (3, 32, 32), 10): 272_474}
SEED = 7
SGD = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9)
ADAM = OptimizerSpec(name="adam", lr=0.001)
STEPS = 3
BLOCK_STEPS = 5
#: The checks after versions and setup, in order; ``--checks`` runs a subset (the broken-adapter tests do).
CHECKS = ("models", "reference_counts", "isolated", "batchnorm", "after_training", "learns", "evaluates", "blocks",
          "oom")


def fixed_batch(
    shape: tuple[int, ...], classes: int, n: int, seed: int = 123
) -> tuple[np.ndarray, np.ndarray]:
    """The same batch in every framework's process."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *shape)).astype(np.float32), rng.integers(0, classes, size=n).astype(np.int64)


class Probe:
    """Runs every check on one adapter, recording outcomes instead of stopping at the first failure."""

    def __init__(self, adapter: Adapter, checks: tuple[str, ...] = CHECKS) -> None:
        self.adapter = adapter
        self.checks = checks
        self.result: dict[str, Any] = {"name": adapter.name, "checks": {}}
        self.arrays: dict[str, np.ndarray] = {}

    def check(self, name: str, fn: Callable[[], dict[str, Any]]) -> None:
        t0 = time.perf_counter()
        try:
            out = fn()
            out["error"] = None
        except Exception:  # noqa: BLE001 - a failing check is recorded and reported by the test that reads it
            out = {"error": traceback.format_exc()[-6000:]}
        out["elapsed_s"] = time.perf_counter() - t0
        self.result["checks"][name] = out

    def versions(self) -> dict[str, Any]:
        return {"versions": self.adapter.versions()}

    def setup(self) -> dict[str, Any]:
        return {"facts": self.adapter.setup(RuntimeConfig(device="cpu", threads=1))}

    def models(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for model, shape, classes in MODELS:
            desc = build_description(model, shape, classes)
            weights = init_weights(desc, SEED)
            self.adapter.build(desc, weights, SGD)
            back = self.adapter.get_weights()
            x, y = fixed_batch(shape, classes, 8)
            batch = self.adapter.prepare_batch(x, y)
            logits = self.adapter.predict(batch)
            self.arrays[f"{model}/logits0"] = logits
            self.arrays[f"{model}/loss0"] = np.asarray(self.adapter.evaluate(x, y, 8).loss)
            steps = STEPS_FOR.get(model, STEPS)
            for _ in range(steps):
                self.adapter.train_step(batch)
            for i, w in enumerate(self.adapter.get_weights()):
                self.arrays[f"{model}/sgd{steps}/{i}"] = w
            out[model] = {
                "param_count": self.adapter.param_count(),
                "expected_param_count": desc.param_count(),
                "output_shape": list(logits.shape),
                "expected_output_shape": [8, *desc.output_shape],
                "round_trip_exact": len(back) == len(weights)
                and all(
                    a.shape == b.shape and np.array_equal(a, b) for a, b in zip(weights, back, strict=True)
                ),
                "round_trip_shapes": [list(a.shape) for a in back],
                "expected_shapes": [list(a.shape) for a in weights],
            }
        model, shape, classes = MODELS[1]
        desc = build_description(model, shape, classes)
        self.adapter.build(desc, init_weights(desc, SEED), ADAM)
        batch = self.adapter.prepare_batch(*fixed_batch(shape, classes, 8))
        for _ in range(STEPS):
            self.adapter.train_step(batch)
        for i, w in enumerate(self.adapter.get_weights()):
            self.arrays[f"{model}/adam{STEPS}/{i}"] = w
        return out

    def reference_counts(self) -> dict[str, Any]:
        """The framework's own parameter count of each reference network (no forward pass needed)."""
        out: dict[str, Any] = {}
        for (model, shape, classes), expected in REFERENCE_COUNTS.items():
            desc = build_description(model, shape, classes)
            self.adapter.build(desc, init_weights(desc, SEED), SGD)
            out[model] = {"param_count": self.adapter.param_count(), "reference": expected,
                          "description": desc.param_count()}
        return out

    def learns(self) -> dict[str, Any]:
        desc = build_description("osu_cnn", (1, 12, 12), 4)
        self.adapter.build(desc, init_weights(desc, SEED), SGD)
        x, y = fixed_batch((1, 12, 12), 4, 16)
        before = self.adapter.evaluate(x, y, 16).loss
        batch = self.adapter.prepare_batch(x, y)
        for _ in range(10):
            self.adapter.train_step(batch)
        return {"loss_before": before, "loss_after": self.adapter.evaluate(x, y, 16).loss}

    def evaluates(self) -> dict[str, Any]:
        model, shape, classes = MODELS[1]
        desc = build_description(model, shape, classes)
        self.adapter.build(desc, init_weights(desc, SEED), SGD)
        x, y = fixed_batch(shape, classes, 50, seed=5)
        ev = self.adapter.evaluate(x, y, 16)  # 50 = 3 full batches and a short one
        return {"accuracy": ev.accuracy, "loss": ev.loss, "samples": ev.samples}

    def blocks(self) -> dict[str, Any]:
        """After train_step returns, nothing is pending: a forced read right after finds no work to wait for.

        Several steps are issued back to back before the read, so that work a lazy step leaves queued
        adds up to several steps' time, far above the noise of a loaded machine.
        """
        desc = build_description("deep_cnn", (3, 16, 16), 4)
        self.adapter.build(desc, init_weights(desc, SEED), SGD)
        batch = self.adapter.prepare_batch(*fixed_batch((3, 16, 16), 4, 32))
        for _ in range(2):
            self.adapter.train_step(batch)
        self.adapter.get_weights()
        synced = []
        for _ in range(3):  # what one step really costs: a step, then a read that waits for everything
            t0 = time.perf_counter()
            self.adapter.train_step(batch)
            self.adapter.get_weights()
            synced.append(time.perf_counter() - t0)
        before = self.adapter.get_weights()
        t0 = time.perf_counter()
        for _ in range(BLOCK_STEPS):
            self.adapter.train_step(batch)
        t1 = time.perf_counter()
        after = self.adapter.get_weights()  # forces a synchronisation in every framework
        t2 = time.perf_counter()
        self.adapter.get_weights()
        t3 = time.perf_counter()
        return {
            "steps": BLOCK_STEPS,
            "calls_s": t1 - t0,
            "sync_s": t2 - t1,
            "idle_read_s": t3 - t2,
            "synced_step_s": float(np.median(synced)),
            "weights_changed": any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True)),
        }

    def batchnorm(self) -> dict[str, Any]:
        """Running statistics of every BatchNorm after one SGD step (deep_cnn: its last ones see 8 values)."""
        model, shape, classes = MODELS[2]
        desc = build_description(model, shape, classes)
        self.adapter.build(desc, init_weights(desc, SEED), SGD)
        self.adapter.train_step(self.adapter.prepare_batch(*fixed_batch(shape, classes, 8)))
        stats = self.adapter.batchnorm_state()
        shapes = [desc.input_shape, *desc.shapes()[:-1]]
        bns = [(layer, s) for layer, s in zip(desc.layers, shapes, strict=True) if isinstance(layer, BatchNorm)]
        if len(stats) != len(bns):
            raise AssertionError(f"batchnorm_state() gave {len(stats)} pairs for {len(bns)} BatchNorm layers")
        for i, (mean, var) in enumerate(stats):
            self.arrays[f"bn/{i}/mean"] = np.asarray(mean, dtype=np.float64)
            self.arrays[f"bn/{i}/var"] = np.asarray(var, dtype=np.float64)
        return {
            "n": [8 * int(np.prod(s[1:])) for _, s in bns],  # values per channel: batch x H x W
            "momentum": [layer.momentum for layer, _ in bns],
            "declared": getattr(self.adapter, "bn_running_variance", "unbiased"),
        }

    def after_training(self) -> dict[str, Any]:
        """Inference-mode logits after three steps (tiny_cnn, batch 32: BN sees 2048 values per channel)."""
        model, shape, classes = MODELS[1]
        desc = build_description(model, shape, classes)
        self.adapter.build(desc, init_weights(desc, SEED), SGD)
        batch = self.adapter.prepare_batch(*fixed_batch(shape, classes, 32))
        for _ in range(STEPS):
            self.adapter.train_step(batch)
        self.arrays["after/logits"] = self.adapter.predict(batch)
        return {}

    def isolated(self) -> dict[str, Any]:
        """Small models whose logits NumPy computes (verdicts.ISOLATED), each isolating one layer rule."""
        for name, desc in ISOLATED.items():
            weights = init_weights(desc, SEED)
            x, y = fixed_batch(desc.input_shape, desc.classes, 6, seed=11)
            x = x * 2.0 + 0.5  # a batch mean and variance far from the fresh running statistics (0, 1)
            self.adapter.build(desc, weights, SGD)
            self.arrays[f"isolated/{name}/logits"] = self.adapter.predict(self.adapter.prepare_batch(x, y))
            self.arrays[f"isolated/{name}/x"] = x
            for i, w in enumerate(weights):
                self.arrays[f"isolated/{name}/w{i}"] = w
        return {}

    def oom(self) -> dict[str, Any]:
        cls = type(self.adapter)
        supplied = getattr(cls.oom_examples, "__func__", None) is not getattr(Adapter.oom_examples, "__func__", None)
        yes, no = cls.oom_examples()
        return {
            "supplied": supplied,
            "oom_recognised": [
                [type(e).__module__ + "." + type(e).__qualname__, str(e)[:120], bool(self.adapter.is_oom(e))]
                for e in yes
            ],
            "not_oom_recognised": [
                [type(e).__qualname__, str(e)[:120], bool(self.adapter.is_oom(e))] for e in no
            ],
        }

    def run(self) -> None:
        self.check("versions", self.versions)
        self.check("setup", self.setup)
        if self.result["checks"]["setup"]["error"] is None:
            for name in self.checks:
                self.check(name, getattr(self, name))
        self.result["extras"] = {"trace_count": getattr(self.adapter, "trace_count", None)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.contract.probe")
    parser.add_argument("--target", required=True, help="the adapter as module:Class")
    parser.add_argument("--out", required=True, type=Path, help="directory for result.json and reference.npz")
    parser.add_argument("--checks", default=",".join(CHECKS), help="comma-separated subset of " + ", ".join(CHECKS))
    args = parser.parse_args(argv)
    module_name, _, attr = args.target.partition(":")
    adapter: Adapter = getattr(importlib.import_module(module_name), attr)()
    probe = Probe(adapter, tuple(c for c in args.checks.split(",") if c))
    probe.run()
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "reference.npz", **probe.arrays)
    text = json.dumps(
        probe.result, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v)
    )
    (args.out / "result.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
