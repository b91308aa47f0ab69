"""Issue 23, docs/scaling.md (c): how a sweep would scale on 8, 64 and 512 GPUs, simulated with the real scheduler.

The scheduler (harness/run/scheduler.py, the one RayExecutor drives) runs against a simulated backend: a clock, one
slot per GPU, each trial taking the duration measured for its (framework, batch size) in a results store (median
``elapsed_s`` over its repeats) plus Ray's per-trial overhead, and the driver paying ``--write-ms`` per stored row
(it writes the store alone, one trial at a time) during which it submits nothing.

Workloads:

* ``osu``: the full Ohio State replay, 4 frameworks x 9 sizes (4..1024) x 3 repeats = 108 trials, 12 chains;
* ``5-model``: the same grid for each of the catalogue's 5 models (540 trials, 60 chains). Only osu_cnn's durations
  are measured; another model's training seconds are osu_cnn's scaled by its training FLOPs per sample
  (harness/flops.py) on the store's input shape -- a model, not a measurement, said so in the output.

A trial's duration = its fixed seconds (``elapsed_s - train_s``: start-up, setup, evaluation) + its training seconds
scaled from what the store's trial trained on to the replay's 10 epochs of 50,000 images (``--replay-samples``).

For each, the makespan against the lower bound max(longest chain, total work / GPUs), and the driver's load (rows
per second it must write at the peak rate of completions) against ``--writes-per-s`` (measured: ``--measure-store``).

    .venv/bin/python benchmarks/scaling_sim.py --store /tmp/simstore --ray-overhead-ms 300 --measure-store
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
import tempfile
import time
from collections.abc import Hashable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.config.trial import OptimizerSpec, TrialSpec  # noqa: E402
from harness.records import TrialOutcome  # noqa: E402
from harness.run.chains import split_chains  # noqa: E402
from harness.run.scheduler import cell_of, run_chains  # noqa: E402
from harness.store import Store  # noqa: E402

SIZES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
MODELS = ("tiny_cnn", "osu_cnn", "deep_cnn", "resnet20", "resnet18")


def durations(store_dir: Path) -> tuple[dict[tuple[str, int], tuple[float, float]], tuple[int, ...], int]:
    """(per (framework, batch size): the medians over its trials of (fixed seconds = elapsed_s - train_s: start-up,
    setup, evaluation; train_s), the input shape, the samples one trial trained on)."""
    import json

    with Store.open(store_dir, create=False, readonly=True) as store:
        rows = [r for r in store.trials() if r["status"] == "ok" and r["elapsed_s"] and r["train_s"]]
        spec = json.loads(store.runs()[-1]["spec_json"])
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in rows:
        by.setdefault((r["framework"], int(r["batch_size"])), []).append(
            (float(r["elapsed_s"]) - float(r["train_s"]), float(r["train_s"])))
    data = spec.get("data") or {}
    shape = tuple(data.get("input_shape") or (1, 28, 28))
    trained = int(spec.get("epochs") or 1) * int(data.get("n_train") or spec.get("train_samples") or 1)
    return ({k: (statistics.median(f for f, _ in v), statistics.median(t for _, t in v)) for k, v in by.items()},
            shape, trained)


def flop_ratios(shape: tuple[int, ...], classes: int = 10) -> dict[str, float]:
    """Each catalogue model's training FLOPs per sample relative to osu_cnn's, on ``shape``."""
    from harness.flops import train_flop_per_sample
    from harness.models import build_description

    base = train_flop_per_sample(build_description("osu_cnn", shape, classes))
    return {m: train_flop_per_sample(build_description(m, shape, classes)) / base for m in MODELS}


def _trial(framework: str, model: str, batch: int, repeat: int) -> TrialSpec:
    return TrialSpec(experiment="sim", framework=framework, model=model, dataset="sim", batch_size=batch,
                     repeat=repeat, seed=repeat, epochs=1, warmup_steps=1, timed_steps=1,
                     optimizer=OptimizerSpec(name="adam", lr=0.001, momentum=0.0), device="gpu", threads=1,
                     timeout_s=3600.0, variant=model)


class SimBackend:
    """Slots = GPUs; a trial ends ``duration + overhead`` after its submission; the driver's writes take time."""

    def __init__(self, gpus: int, duration: dict[str, float], overhead_s: float, write_s: float) -> None:
        self.gpus, self.duration, self.overhead_s, self.write_s = gpus, duration, overhead_s, write_s
        self.now = 0.0
        self._heap: list[tuple[float, int, TrialSpec, float]] = []
        self._n = 0
        self.busy_s = 0.0

    def slots(self) -> int:
        return self.gpus

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        self._n += 1
        d = self.duration[trial.trial_hash] + self.overhead_s
        self.busy_s += d
        heapq.heappush(self._heap, (self.now + d, self._n, trial, d))
        return self._n

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        end, n, trial, d = heapq.heappop(self._heap)
        self.now = max(self.now, end)
        return [(n, TrialOutcome(trial=trial, status="ok", elapsed_s=d))]

    def cancel(self, handles: list[Hashable]) -> None:
        pass

    def write(self, outcome: TrialOutcome) -> None:
        self.now += self.write_s  # the driver writes the row; nothing is submitted meanwhile


def simulate(trials: list[TrialSpec], duration: dict[str, float], gpus: int, overhead_s: float,
             write_s: float, known: bool = False) -> dict[str, float]:
    """``known``: the scheduler is given every trial's duration beforehand (a study run again, or resumed, into the
    same store); otherwise it learns them as trials finish."""
    backend = SimBackend(gpus, duration, overhead_s, write_s)
    prior = [(cell_of(t), duration[t.trial_hash] + overhead_s) for t in trials] if known else []
    run_chains(trials, submit=backend.submit, wait=backend.wait, cancel=backend.cancel, slots=backend.slots,
               on_done=backend.write, known=prior)
    chains = split_chains(trials)
    longest = max(sum(duration[t.trial_hash] + overhead_s for t in c.trials) for c in chains)
    total = sum(duration[t.trial_hash] + overhead_s for t in trials)
    bound = max(longest, total / gpus)
    return {"makespan": backend.now, "bound": bound, "longest": longest, "total": total, "chains": len(chains),
            "util": total / (gpus * backend.now), "peak_rows_per_s": min(gpus, len(chains)) /
            statistics.median(duration[t.trial_hash] + overhead_s for t in trials)}


def longest_first(trials: list[TrialSpec], duration: dict[str, float]) -> list[TrialSpec]:
    """The same trials in an order that starts the longest chains first (the scheduler starts the ready trial earliest
    in the list: a chain-major list by descending chain length is longest-processing-time-first)."""
    chains = sorted(split_chains(trials), key=lambda c: -sum(duration[t.trial_hash] for t in c.trials))
    return [t for c in chains for t in c.trials]


def workload(name: str, measured: dict[tuple[str, int], tuple[float, float]], ratios: dict[str, float],
             train_scale: float) -> tuple[list[TrialSpec], dict[str, float]]:
    models = ("osu_cnn",) if name == "osu" else MODELS
    fws = [f for f in FRAMEWORKS if all((f, b) in measured for b in SIZES)]
    if len(fws) < len(FRAMEWORKS):
        missing = sorted({f"{f} bs={b}" for f in FRAMEWORKS for b in SIZES if (f, b) not in measured})
        raise SystemExit(f"the store lacks durations for: {', '.join(missing[:8])}...")
    trials, dur = [], {}
    for model in models:
        for fw in fws:
            for b in SIZES:
                for r in range(3):
                    t = _trial(fw, model, b, r)
                    trials.append(t)
                    fixed, train = measured[(fw, b)]
                    dur[t.trial_hash] = fixed + train * train_scale * ratios.get(model, 1.0)
    return trials, dur


def measure_store_writes(n: int = 200, steps: int = 1000, samples: int = 300) -> float:
    """Rows per second the store takes: ``n`` trials each with ``steps`` step times and ``samples`` sampler rows
    (synchronous=FULL, one transaction per trial, as a sweep writes them)."""
    from harness.records import MonitorResult, WorkerMetrics

    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp)) as store:
        run = store.begin_run("sim", {}, "", {})
        outcomes = [TrialOutcome(trial=_trial("pytorch", "osu_cnn", 4 + i, 0), status="ok",
                                 metrics=WorkerMetrics(step_samples_per_s=1.0), step_times_ms=[1.0] * steps,
                                 phase_steps={"warmup": 5, "timed": 20},
                                 monitor=MonitorResult(samples=[{"t_s": j * 0.1, "phase": "train"}
                                                                for j in range(samples)])) for i in range(n)]
        t0 = time.monotonic()
        for o in outcomes:
            store.write_trial(o, run, {})
        return n / (time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="an --out directory with the 4 frameworks x 9 sizes")
    parser.add_argument("--ray-overhead-ms", type=float, default=0.0, help="Ray's added cost per trial (measured: "
                        "benchmarks/ray_scaling.py (b))")
    parser.add_argument("--writes-per-s", type=float, default=0.0, help="the store's rows per second")
    parser.add_argument("--replay-samples", type=float, default=10 * 50000,
                        help="samples one replay trial trains on (default: 10 epochs x 50,000 CIFAR-10 images); the "
                        "store's training seconds are scaled by this over what its trials trained on")
    parser.add_argument("--measure-store", action="store_true", help="measure --writes-per-s here first")
    args = parser.parse_args(argv)
    measured, shape, trained = durations(args.store)
    scale = args.replay_samples / trained
    writes = measure_store_writes() if args.measure_store else args.writes_per_s
    if args.measure_store:
        print(f"store: {writes:.0f} trial rows/s (1000 step times + 300 samples each, synchronous=FULL)")
    ratios = flop_ratios(shape)
    print(f"durations: per (framework, size) from {args.store} (input {shape}, {trained} samples a trial): "
          f"fixed (elapsed_s - train_s) + train_s x {scale:g} (to {args.replay_samples:g} samples); "
          f"Ray overhead {args.ray_overhead_ms:.0f} ms/trial; store write {1000 / writes if writes else 0:.1f} ms/row")
    print("5-model: osu_cnn's train_s x each model's training FLOPs ratio (modelled, not measured): "
          + ", ".join(f"{m} {r:.2g}" for m, r in ratios.items()))
    print(f"{'workload':<9} {'trials':>6} {'chains':>6} {'GPUs':>5} {'makespan s':>11} {'bound s':>9} "
          f"{'ratio':>6} {'GPU util':>8} {'rows/s':>7} {'durations known':>15} {'longest-first order':>19}")
    for name in ("osu", "5-model"):
        trials, dur = workload(name, measured, ratios, scale)
        for gpus in (1, 8, 64, 512):
            write_s = 1 / writes if writes else 0.0
            r = simulate(trials, dur, gpus, args.ray_overhead_ms / 1000, write_s)
            again = simulate(trials, dur, gpus, args.ray_overhead_ms / 1000, write_s, known=True)
            lpt = simulate(longest_first(trials, dur), dur, gpus, args.ray_overhead_ms / 1000, write_s)
            print(f"{name:<9} {len(trials):>6} {r['chains']:>6.0f} {gpus:>5} {r['makespan']:>11.0f} "
                  f"{r['bound']:>9.0f} {r['makespan'] / r['bound']:>6.2f} {r['util'] * 100:>7.1f}% "
                  f"{r['peak_rows_per_s']:>7.3f} {again['makespan'] / again['bound']:>15.2f} "
                  f"{lpt['makespan'] / lpt['bound']:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
