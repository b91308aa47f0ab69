"""The contract checks that need a framework, run in a subprocess of their own: one framework per process.

``python -m tests.contract.probe --target module:Class --out DIR`` loads one adapter, exercises it on
CPU and writes ``DIR/result.json`` (facts and per-check outcomes) and ``DIR/reference.npz`` (logits and
weights that the parent compares across frameworks). The pytest process never imports a framework: it
only reads these files and judges them (``verdicts.py``, ``test_contract.py``).

Every check (``checks.CHECKS``) is recorded on its own: one that raises keeps its traceback and the others
run, and one whose capabilities the adapter lacks (``checks.missing_for``) records what is missing. Missing
layer hooks do not stop a check (an adapter with its own ``build()`` may build the layer anyway, and the
attempt is the evidence); any other missing capability does, since the base class's default has nothing to
show. ``failing_step`` may end its process, so it runs in one of its own (``--checks failing_step``) and
writes its progress to ``DIR/progress.txt`` line by line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import Adapter, OptimizerSpec, RuntimeConfig, SetupFacts, capabilities
from harness.models import BatchNorm, build_description, init_weights
from tests.contract.checks import (
    BATCH_CHANGE_MODEL,
    BATCH_CHANGE_RULE_RUN,
    BATCH_CHANGE_RUNS,
    BATCH_CHANGE_SIZES,
    BATCH_CHANGE_STEPS,
    BY_NAME,
    FAILING_STEP,
    FAILING_STEP_BATCH,
    FAILING_STEP_HEADROOM_MIB,
    GRADIENT_MODELS,
    LEARNS,
    MODELS,
    REFERENCE_COUNTS,
    SHARED,
    TIMING,
    TIMING_BATCH,
    missing_for,
    runs_without,
)
from tests.contract.verdicts import ACCUMULATION_MODEL, ISOLATED

#: SGD steps before the weights are compared. ResNet-18 gets one: its last stage is 1x1 at 32x32 input, so
#: batch norm there normalises 8 numbers, and with lr 0.05 and momentum 0.9 the frameworks' float rounding
#: (logits agree to 5e-6) grows past 1e-3 by the third step (measured: MXNet 15x the tolerance, 2x at 64x64
#: input). One step still checks the backward pass of every layer against the reference.
STEPS_FOR = {"resnet18": 1}
SEED = 7
SGD = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9)
ADAM = OptimizerSpec(name="adam", lr=0.001)
STEPS = 3
#: single steps timed, each followed by a read of the weights; the verdict takes medians
TIMING_REPEATS = 5
PROGRESS = "progress.txt"
#: the compilation cache the probes of one session share, beside their output directories
COMPILE_CACHE = "compile-cache"


def fixed_batch(
    shape: tuple[int, ...], classes: int, n: int, seed: int = 123
) -> tuple[np.ndarray, np.ndarray]:
    """The same batch in every framework's process."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *shape)).astype(np.float32), rng.integers(0, classes, size=n).astype(np.int64)


def _flat(weights: list[np.ndarray]) -> np.ndarray:
    """Weights as one float64 array, in order, each flattened C-order (flat_gradient's layout)."""
    return np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in weights])


def _vmdata_mib() -> float:
    """This process's VmData (what RLIMIT_DATA counts), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmData in /proc/self/status")


class Probe:
    """Runs the chosen checks on one adapter, recording outcomes instead of stopping at the first failure."""

    def __init__(self, adapter: Adapter, checks: tuple[str, ...] = SHARED, out: Path | None = None) -> None:
        self.adapter = adapter
        self.checks = checks
        self.out = out
        cls = type(adapter)
        self.result: dict[str, Any] = {"name": adapter.name, "checks": {}, "capabilities": list(capabilities(cls)),
                                       "import_name": getattr(cls, "import_name", "")}
        self.arrays: dict[str, np.ndarray] = {}

    def check(self, name: str, fn: Callable[[], dict[str, Any]], missing: tuple[str, ...] = ()) -> None:
        t0 = time.perf_counter()
        try:
            out = fn()
            out["error"] = None
        except Exception:  # noqa: BLE001 - a failing check is recorded and reported by the test that reads it
            out = {"error": traceback.format_exc()[-6000:]}
        out["elapsed_s"] = time.perf_counter() - t0
        out["missing"], out["ran"] = list(missing), True
        self.result["checks"][name] = out

    def versions(self) -> dict[str, Any]:
        return {"versions": self.adapter.versions()}

    def setup(self) -> dict[str, Any]:
        # math_mode as a worker asks by default: on the CPU an adapter with the capability reads back "n/a"
        # and a persistent compilation cache, as a sweep's worker has one: the probe builds the same models several
        # times (a program compiled once is read back, never run differently), and the probes of one test session
        # share it (JAX: 100 s of compiling without it, issue 30); under pytest, the one kept between sessions
        # (tests/conftest.py, BATCHSCOPE_TEST_COMPILE_CACHE)
        kept = os.environ.get("BATCHSCOPE_TEST_COMPILE_CACHE")
        cache = kept or (str(self.out.parent / COMPILE_CACHE) if self.out is not None else None)
        got = self.adapter.setup(RuntimeConfig(device="cpu", threads=1, math_mode="ieee", compile_cache_dir=cache))
        # a record, or the flat mapping of an adapter written before 0.9: the worker reads either
        return {"facts": SetupFacts.of(got).to_dict(), "returned": type(got).__name__,
                "record_or_mapping": isinstance(got, (SetupFacts, Mapping))}

    def _build(self, model: str, shape: tuple[int, int, int], classes: int, optimizer: OptimizerSpec = SGD) -> Any:
        desc = build_description(model, shape, classes)
        self.adapter.build(desc, init_weights(desc, SEED), optimizer)
        return desc

    def model(self, model: str) -> dict[str, Any]:
        """One catalogue model: parameter count, output shape, weight round trip, logits, loss and SGD steps."""
        _, shape, classes = next(m for m in MODELS if m[0] == model)
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
        return {
            "param_count": self.adapter.param_count(),
            "expected_param_count": desc.param_count(),
            "output_shape": list(logits.shape),
            "expected_output_shape": [8, *desc.output_shape],
            "round_trip_exact": len(back) == len(weights)
            and all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(weights, back, strict=True)),
            "round_trip_shapes": [list(a.shape) for a in back],
            "expected_shapes": [list(a.shape) for a in weights],
            "steps": steps,
        }

    def adam(self) -> dict[str, Any]:
        """Weights after three Adam steps on tiny_cnn."""
        model, shape, classes = MODELS[1]
        self._build(model, shape, classes, ADAM)
        batch = self.adapter.prepare_batch(*fixed_batch(shape, classes, 8))
        for _ in range(STEPS):
            self.adapter.train_step(batch)
        for i, w in enumerate(self.adapter.get_weights()):
            self.arrays[f"adam/{model}/{i}"] = w
        return {"model": model, "steps": STEPS}

    def reference_count(self, model: str) -> dict[str, Any]:
        """The framework's own parameter count of a reference network (no forward pass needed)."""
        (_, shape, classes), expected = next((k, v) for k, v in REFERENCE_COUNTS.items() if k[0] == model)
        desc = self._build(model, shape, classes)
        return {"param_count": self.adapter.param_count(), "reference": expected, "description": desc.param_count()}

    def learns(self) -> dict[str, Any]:
        model, shape, classes = LEARNS
        self._build(model, shape, classes)
        x, y = fixed_batch(shape, classes, 16)
        before = self.adapter.evaluate(x, y, 16).loss
        batch = self.adapter.prepare_batch(x, y)
        for _ in range(10):
            self.adapter.train_step(batch)
        return {"loss_before": before, "loss_after": self.adapter.evaluate(x, y, 16).loss}

    def evaluates(self) -> dict[str, Any]:
        model, shape, classes = MODELS[1]
        self._build(model, shape, classes)
        x, y = fixed_batch(shape, classes, 50, seed=5)
        ev = self.adapter.evaluate(x, y, 16)  # 50 = 3 full batches and a short one
        return {"accuracy": ev.accuracy, "loss": ev.loss, "samples": ev.samples}

    def step_timing(self) -> dict[str, Any]:
        """Single steps from idle, each followed by the first blocking read (the weights) and a second, idle one.

        A step that waits for its work spends the step inside the call and finds nothing pending at the read; one
        that returns early leaves the step's work to the read (see ``verdicts.step_waits``).
        """
        model, shape, classes = TIMING
        self._build(model, shape, classes)
        batch = self.adapter.prepare_batch(*fixed_batch(shape, classes, TIMING_BATCH))
        for _ in range(2):  # warm: compilation, allocator pools
            self.adapter.train_step(batch)
            self.adapter.get_weights()
        before = self.adapter.get_weights()
        call_s, first_read_s, idle_read_s = [], [], []
        for _ in range(TIMING_REPEATS):
            self.adapter.get_weights()  # nothing pending before the step
            t0 = time.perf_counter()
            self.adapter.train_step(batch)
            t1 = time.perf_counter()
            self.adapter.get_weights()  # waits for whatever the step left behind
            t2 = time.perf_counter()
            self.adapter.get_weights()  # what a read costs with nothing to wait for
            t3 = time.perf_counter()
            call_s.append(t1 - t0)
            first_read_s.append(t2 - t1)
            idle_read_s.append(t3 - t2)
        after = self.adapter.get_weights()
        return {"call_s": call_s, "first_read_s": first_read_s, "idle_read_s": idle_read_s,
                "weights_changed": any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))}

    def queued_steps(self) -> dict[str, Any]:
        """``queued_steps``: the same batches trained by ``train_step`` one by one and by ``train_step_queued`` with
        one ``wait_steps`` after them, from the same weights (the weights of both kept); then single waits timed as
        in :meth:`step_timing`: two steps queued, ``wait_steps``, the first read after it and an idle one."""
        model, shape, classes = TIMING
        desc = build_description(model, shape, classes)
        weights = init_weights(desc, SEED)
        batches = [fixed_batch(shape, classes, TIMING_BATCH, seed=30 + i) for i in range(STEPS)]
        results = {}
        for way in ("waited", "queued"):
            self.adapter.build(desc, weights, SGD)
            for x, y in batches:
                batch = self.adapter.prepare_batch(x, y)
                if way == "queued":
                    self.adapter.train_step_queued(batch)
                else:
                    self.adapter.train_step(batch)
            if way == "queued":
                self.adapter.wait_steps()
            results[way] = self.adapter.get_weights()
        for i, (a, b) in enumerate(zip(results["waited"], results["queued"], strict=True)):
            self.arrays[f"queued_steps/{i}/waited"], self.arrays[f"queued_steps/{i}/queued"] = a, b
        batch = self.adapter.prepare_batch(*batches[0])
        wait_s, first_read_s, idle_read_s = [], [], []
        for _ in range(TIMING_REPEATS):
            self.adapter.get_weights()  # nothing pending before the steps
            for _ in range(2):
                self.adapter.train_step_queued(batch)
            t0 = time.perf_counter()
            self.adapter.wait_steps()
            t1 = time.perf_counter()
            self.adapter.get_weights()  # waits for whatever wait_steps left behind
            t2 = time.perf_counter()
            self.adapter.get_weights()
            t3 = time.perf_counter()
            wait_s.append(t1 - t0)
            first_read_s.append(t2 - t1)
            idle_read_s.append(t3 - t2)
        return {"weights": len(weights), "steps": len(batches), "wait_s": wait_s, "first_read_s": first_read_s,
                "idle_read_s": idle_read_s}

    def failing_step(self) -> dict[str, Any]:
        """A step whose work cannot succeed (a batch far past a memory limit set after building) must fail inside
        ``train_step``: raise there, or end the process there. The progress file says how far it got, since
        the framework may end this process (TensorFlow does, in native code)."""
        if self.out is None:
            raise RuntimeError("failing_step writes its progress under --out")
        fd = os.open(self.out / PROGRESS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def mark(text: str) -> None:
            os.write(fd, (text.replace("\n", " ")[:400] + "\n").encode())  # unbuffered: survives a crash

        model, shape, classes = FAILING_STEP
        self._build(model, shape, classes)
        batch = self.adapter.prepare_batch(*fixed_batch(shape, classes, FAILING_STEP_BATCH))
        limit_mib = _vmdata_mib() + FAILING_STEP_HEADROOM_MIB
        resource.setrlimit(resource.RLIMIT_DATA, (int(limit_mib * 2**20), resource.RLIM_INFINITY))
        mark(f"limit {limit_mib:.0f}")
        t0 = time.perf_counter()
        mark("call")
        try:
            self.adapter.train_step(batch)
        except Exception as e:  # noqa: BLE001 - the expected outcome: the step's own failure, raised in the step
            mark(f"raised {time.perf_counter() - t0:.4f} {type(e).__name__}: {e}")
            return {"outcome": "raised", "exception": f"{type(e).__name__}: {str(e)[:300]}"}
        mark(f"returned {time.perf_counter() - t0:.4f}")
        mark("read")
        try:
            self.adapter.get_weights()
        except Exception as e:  # noqa: BLE001 - the step's failure surfacing only now is the defect this finds
            mark(f"read_raised {type(e).__name__}: {e}")
            return {"outcome": "read_raised", "exception": f"{type(e).__name__}: {str(e)[:300]}"}
        mark("read_ok")
        return {"outcome": "read_ok"}

    def batchnorm(self) -> dict[str, Any]:
        """Running statistics of every BatchNorm after one SGD step (deep_cnn: its last ones see 8 values)."""
        model, shape, classes = MODELS[2]
        desc = self._build(model, shape, classes)
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
        self._build(model, shape, classes)
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

    def accumulation(self) -> dict[str, Any]:
        """Two half batches accumulated with weight 1/2 each, then applied, against one step on the whole batch."""
        desc = ACCUMULATION_MODEL
        weights = init_weights(desc, SEED)
        x, y = fixed_batch(desc.input_shape, desc.classes, 8)
        self.adapter.build(desc, weights, SGD)
        self.adapter.train_step(self.adapter.prepare_batch(x, y))
        whole = self.adapter.get_weights()
        self.adapter.build(desc, weights, SGD)
        for half in (slice(0, 4), slice(4, 8)):
            self.adapter.accumulate_gradients(self.adapter.prepare_batch(x[half], y[half]), 0.5)
        held = self.adapter.get_weights()
        self.adapter.apply_accumulated()
        for i, (w0, w1, w2) in enumerate(zip(weights, held, self.adapter.get_weights(), strict=True)):
            self.arrays[f"accumulation/{i}/init"], self.arrays[f"accumulation/{i}/held"] = w0, w1
            self.arrays[f"accumulation/{i}/applied"], self.arrays[f"accumulation/{i}/whole"] = w2, whole[i]
        return {"weights": len(weights), "declared": bool(getattr(self.adapter, "supports_accumulation", False))}

    def batch_change(self) -> dict[str, Any]:
        """A batch-size schedule's change (issue 52): steps at one size, ``set_learning_rate``, steps at another, each
        batch the next slice of one stream; the weights and BatchNorm statistics after every step, with Adam, plain
        SGD and SGD with momentum. In the momentum run, where the adapter has ``flat_gradient``, the gradient before
        every step too (the verdict replays the momentum rule in NumPy from them). Then Adam without the rate change:
        that the change changed the training is checked too."""
        _, shape, classes = next(m for m in MODELS if m[0] == BATCH_CHANGE_MODEL)
        (b1, b2), (k, m) = BATCH_CHANGE_SIZES, BATCH_CHANGE_STEPS
        x, y = fixed_batch(shape, classes, b1 * k + b2 * m, seed=52)
        sizes = [b1] * k + [b2] * m
        gradients = "flat_gradient" in capabilities(type(self.adapter))
        for name in (*BATCH_CHANGE_RUNS, "adam_same_rate"):
            optimizer, momentum, lr1, lr2 = BATCH_CHANGE_RUNS[name.removesuffix("_same_rate")]
            spec = OptimizerSpec(name=optimizer, lr=lr1, momentum=momentum)  # type: ignore[arg-type]
            desc = self._build(BATCH_CHANGE_MODEL, shape, classes, spec)
            rule = gradients and name == BATCH_CHANGE_RULE_RUN
            if rule:
                self.arrays[f"batch_change/{name}/init"] = _flat(init_weights(desc, SEED))
            start = 0
            for i, size in enumerate(sizes):
                if i == k and name != "adam_same_rate":
                    self.adapter.set_learning_rate(lr2)
                xs, ys = x[start : start + size], y[start : start + size]
                if rule:
                    self.arrays[f"batch_change/{name}/step{i}/grad"] = np.asarray(self.adapter.flat_gradient(xs, ys))
                self.adapter.train_step(self.adapter.prepare_batch(xs, ys))
                start += size
                for j, w in enumerate(self.adapter.get_weights()):
                    self.arrays[f"batch_change/{name}/step{i}/w{j}"] = w
                for j, (mean, var) in enumerate(self.adapter.batchnorm_state()):
                    self.arrays[f"batch_change/{name}/step{i}/bn{j}/mean"] = mean
                    self.arrays[f"batch_change/{name}/step{i}/bn{j}/var"] = var
        return {"sizes": sizes, "steps": len(sizes), "runs": list(BATCH_CHANGE_RUNS),
                "rates": {n: [r[2], r[3]] for n, r in BATCH_CHANGE_RUNS.items()},
                "momentum": {n: r[1] for n, r in BATCH_CHANGE_RUNS.items()},
                "rule": BATCH_CHANGE_RULE_RUN if gradients else ""}

    def flat_gradient(self) -> dict[str, Any]:
        """The gradient at the initial weights (which the first SGD step, momentum or not, subtracts times the
        learning rate), and again after one step; around the second call, the weights and the inference-mode
        logits (running statistics) before and after, and the next step's weights against a second build that
        trained the same two steps without asking for gradients (the optimizer state left alone)."""
        out: dict[str, Any] = {"lr": SGD.lr, "models": list(GRADIENT_MODELS)}
        for model in GRADIENT_MODELS:
            _, shape, classes = next(m for m in MODELS if m[0] == model)
            desc = build_description(model, shape, classes)
            weights = init_weights(desc, SEED)
            (x0, y0), (x1, y1) = fixed_batch(shape, classes, 8), fixed_batch(shape, classes, 8, seed=321)
            self.adapter.build(desc, weights, SGD)
            g0 = self.adapter.flat_gradient(x0, y0)
            self.adapter.train_step(self.adapter.prepare_batch(x0, y0))
            after_step = self.adapter.get_weights()
            probe_batch = self.adapter.prepare_batch(x1, y1)
            logits_before = self.adapter.predict(probe_batch)
            g1 = self.adapter.flat_gradient(x1, y1)
            g1_again = self.adapter.flat_gradient(x1, y1)
            held = self.adapter.get_weights()
            logits_after = self.adapter.predict(probe_batch)
            self.adapter.train_step(probe_batch)
            with_gradients = self.adapter.get_weights()
            self.adapter.build(desc, weights, SGD)
            for x, y in ((x0, y0), (x1, y1)):
                self.adapter.train_step(self.adapter.prepare_batch(x, y))
            without = self.adapter.get_weights()
            self.arrays.update({
                f"grad/{model}/g0": np.asarray(g0), f"grad/{model}/g1": np.asarray(g1),
                f"grad/{model}/g1_again": np.asarray(g1_again), f"grad/{model}/w0": _flat(weights),
                f"grad/{model}/w1": _flat(after_step), f"grad/{model}/w1_held": _flat(held),
                f"grad/{model}/logits_before": logits_before, f"grad/{model}/logits_after": logits_after,
                f"grad/{model}/w2_with": _flat(with_gradients), f"grad/{model}/w2_without": _flat(without)})
            out[f"{model}/dtype"] = str(np.asarray(g0).dtype)
        return out

    def oom(self) -> dict[str, Any]:
        cls = type(self.adapter)
        supplied = "oom_examples" in capabilities(cls)
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
        if self.result["checks"]["setup"]["error"] is not None:
            return
        cls = type(self.adapter)
        for name in self.checks:
            spec = BY_NAME[name]
            missing = missing_for(cls, name)
            if missing and not runs_without(missing):
                self.result["checks"][name] = {"missing": list(missing), "ran": False, "error": None}
                continue
            method = getattr(self, spec.method)
            self.check(name, (lambda m=method, a=spec.arg: m(a)) if spec.arg else method, missing)
        self._narrow_missing_layers()

    def _narrow_missing_layers(self) -> None:
        """For an adapter with its own build(), which of a failed or unrun check's missing capabilities it really
        lacks: not the layer hooks of layer types that a check it passed built (resnet20 fails on its residual
        blocks, not on the convolutions osu_cnn showed it builds)."""
        checks = self.result["checks"]
        built = {h for name, r in checks.items() if name in BY_NAME and r.get("ran") and not r.get("error")
                 for h in BY_NAME[name].capabilities() if h.startswith("layer_")}
        for record in checks.values():
            missing = record.get("missing") or []
            lacks = [m for m in missing if not (m.startswith("layer_") and m in built)]
            if (record.get("error") or not record.get("ran")) and lacks and lacks != missing:
                record["lacks"] = lacks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.contract.probe")
    parser.add_argument("--target", required=True, help="the adapter as module:Class")
    parser.add_argument("--out", required=True, type=Path, help="directory for result.json and reference.npz")
    parser.add_argument("--checks", default=",".join(SHARED), help="comma-separated subset of " + ", ".join(BY_NAME))
    args = parser.parse_args(argv)
    module_name, _, attr = args.target.partition(":")
    adapter: Adapter = getattr(importlib.import_module(module_name), attr)()
    args.out.mkdir(parents=True, exist_ok=True)
    probe = Probe(adapter, tuple(c for c in args.checks.split(",") if c), args.out)
    probe.run()
    np.savez(args.out / "reference.npz", **probe.arrays)
    text = json.dumps(
        probe.result, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v)
    )
    (args.out / "result.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
