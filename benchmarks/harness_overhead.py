"""Harness overhead: samples/s of a real harness trial against a bare hand-written loop, per framework.

For each framework, at batch 64 on CPU, a harness trial (fresh worker process, the adapter, the
worker's step timing) and a bare idiomatic loop (``bare_loop.py``, its own fresh process: a PyTorch
eager loop, a ``tf.function`` Keras step, a hybridised Gluon network) run alternately ``--repeats``
times (the order flips every repeat so drift in machine load does not favour one side). The ratio
harness / bare is printed per repeat and as a median; the targets (issue 40, batch 64, one thread, 5 repeats):
step / bare >= 0.98 and end-to-end / bare >= 0.97. Then, for the record,
samples/s at batch 8 and 256 (one run of each kind).

The harness figures are the two the store keeps: step (batch / median step time, every post-warm-up
step) and end-to-end (those steps' samples / their wall time, batch preparation included); the ratio
to bare is printed for both, and beside them end-to-end / step (the same trial's two figures: what the
harness and the framework lose between the step and the user's wall clock, issue 40). Both sides run with
denormals flushed (batchscope's default). The bare figure is
what a user's loop achieves: timed steps / their wall time, with a single synchronisation at the end.
A third column, "bare+sync", is the bare loop synchronised and timed per step the way the harness
must (a step's time can only be read once the device is idle): harness / bare+sync is the harness'
own overhead, bare+sync / bare the price of per-step timing (large only for asynchronous engines).

    python benchmarks/harness_overhead.py --frameworks pytorch,tensorflow,mxnet --repeats 5

``--prefetch-compare`` runs, per repeat in a rotating order, a harness trial with ``prefetch`` (the default: the next
batch gathered and converted on a background thread while the step runs, issue 31), one without, and the bare loop;
printed: end-to-end and step ratios to bare for both, and the data milliseconds per step left on the training thread.

``--worker-compare`` switches the worker's parts off in turn (JAX's persistent compilation cache, the progress
messages, prefetch), each side a harness trial against bare, order rotated (issue 40: JAX's step in the worker below
bare while the same step in one process equals it).

``--progress-compare`` measures what live progress costs (issue 17): each repeat runs, in an order that
rotates every repeat, a harness trial with progress as ``batchscope run`` shows it in a terminal (the
worker's progress messages every 0.5 s, or ``--progress-interval-s``, drawn by the rich display into a
terminal-less console), a harness trial with no progress messages at all, and the bare loop. Printed:
both ratios to bare per repeat, and the median of progress / no-progress.
"""

from __future__ import annotations

import argparse
import io
import sys
from types import SimpleNamespace
from typing import Any

from common import FRAMEWORKS, bare_loop, frameworks_option, harness_trial, machine_facts, median, synthetic_data

#: the goals of issue 40 (batch 64, one thread, medians of 5 repeats): step / bare and end-to-end / bare
TARGET_STEP, TARGET_E2E = 0.98, 0.97
SHAPE_TEXT = "1x28x28, 10 classes"



def _rotated(sides: tuple[str, ...], repeat: int) -> tuple[str, ...]:
    """``sides`` in the order of ``repeat``: rotated by one every repeat, so each side runs first, second and last
    equally often and drift in the machine's load favours none."""
    k = repeat % len(sides)
    return sides[k:] + sides[:k]


def _bare(fw: str, args: argparse.Namespace) -> float:
    """Samples/s of one bare loop with the run's settings."""
    return float(bare_loop(fw, args.batch, args.threads, args.warmup, args.steps)["samples_per_s"])


def _step_rate(out: Any) -> float:
    """A harness trial's step throughput (batch / median post-warm-up step), what the bare loop's figure is."""
    assert out.metrics is not None and out.metrics.step_samples_per_s is not None
    return float(out.metrics.step_samples_per_s)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="comma-separated, from: " + ", ".join(FRAMEWORKS)
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="alternations per framework (>= 5 for the target)"
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="framework threads, the same on both sides")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per run")
    parser.add_argument(
        "--record-batches", default="8,256", help="batch sizes printed for the record ('' for none)"
    )
    parser.add_argument("--progress-compare", action="store_true",
                        help="harness with vs without live progress, against bare (issue 17)")
    parser.add_argument("--progress-interval-s", type=float, default=0.5,
                        help="the worker's progress bound for --progress-compare (0: every step)")
    parser.add_argument("--prefetch-compare", action="store_true",
                        help="harness with the next batch prepared during the step (prefetch, the default) vs "
                             "without, each against bare (issue 31)")
    parser.add_argument("--worker-compare", action="store_true",
                        help="the worker's parts switched off in turn (JAX's compilation cache, progress messages, "
                             "prefetch), each a harness trial against bare: where the step's gap to bare comes from")
    parser.add_argument("--allocator-compare", action="store_true",
                        help="the sweep's worker environment vs the same with a fixed glibc mmap threshold (the "
                             "max-batch 'what helps' setting), each against bare")
    args = parser.parse_args(argv)
    frameworks = frameworks_option(parser, args.frameworks)
    if args.progress_compare:
        return progress_compare(args, frameworks)
    if args.allocator_compare:
        return allocator_compare(args, frameworks)
    if args.worker_compare:
        return worker_compare(args, frameworks)
    if args.prefetch_compare:
        return prefetch_compare(args, frameworks)

    print(machine_facts())
    print(
        f"model osu_cnn {SHAPE_TEXT}, SGD momentum 0.9, CPU, {args.threads} thread(s), "
        f"{args.warmup} warm-up + {args.steps} timed steps per run; harness with prefetch (the default)\n"
    )
    data = synthetic_data()
    summary: dict[str, float] = {}
    e2e_summary: dict[str, float] = {}
    e2e_step_summary: dict[str, float] = {}
    for fw in frameworks:
        ratios: list[float] = []
        e2e_ratios: list[float] = []
        e2e_step: list[float] = []
        own: list[float] = []
        print(f"{fw}, batch {args.batch}:")
        for r in range(args.repeats):
            first_harness = r % 2 == 0
            results: dict[str, float] = {}
            sides = ("harness", "bare", "bare+sync")
            for side in sides if first_harness else sides[::-1]:
                if side == "harness":
                    out = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps)
                    assert out.metrics is not None and out.metrics.e2e_samples_per_s is not None
                    assert out.metrics.prefetch, "the harness trial did not record prefetch as run"
                    results[side] = out.metrics.step_samples_per_s or 0.0
                    results["harness e2e"] = out.metrics.e2e_samples_per_s
                else:
                    results[side] = bare_loop(
                        fw,
                        args.batch,
                        args.threads,
                        args.warmup,
                        args.steps,
                        sync_each_step=side == "bare+sync",
                    )["samples_per_s"]
            ratio = results["harness"] / results["bare"]
            ratios.append(ratio)
            e2e_ratios.append(results["harness e2e"] / results["bare"])
            e2e_step.append(results["harness e2e"] / results["harness"])
            own.append(results["harness"] / results["bare+sync"])
            print(
                f"  repeat {r + 1}: harness step {results['harness']:8.1f}  e2e {results['harness e2e']:8.1f}   "
                f"bare {results['bare']:8.1f}   bare+sync {results['bare+sync']:8.1f} samples/s   "
                f"ratio step {ratio:.3f}  e2e {e2e_ratios[-1]:.3f}  e2e/step {e2e_step[-1]:.3f}   "
                f"harness/bare+sync {own[-1]:.3f}",
                flush=True,
            )
        summary[fw] = median(ratios)
        e2e_summary[fw] = median(e2e_ratios)
        e2e_step_summary[fw] = median(e2e_step)
        print(
            f"  median ratio step {summary[fw]:.3f}, e2e {e2e_summary[fw]:.3f} (targets {TARGET_STEP}, {TARGET_E2E}), "
            f"e2e/step {e2e_step_summary[fw]:.3f}; "
            f"median harness/bare+sync {median(own):.3f}\n",
            flush=True,
        )

    record = [int(b) for b in args.record_batches.split(",") if b]
    if record:
        print("for the record (one run each), samples/s:")
        for fw in frameworks:
            for bs in record:
                m = harness_trial(fw, data, bs, args.threads, args.warmup, args.steps).metrics
                assert m is not None and m.step_samples_per_s is not None and m.e2e_samples_per_s is not None
                h, e = m.step_samples_per_s, m.e2e_samples_per_s
                b = bare_loop(fw, bs, args.threads, args.warmup, args.steps)["samples_per_s"]
                print(
                    f"  {fw:<11} batch {bs:>4}: harness step {h:9.1f}  e2e {e:9.1f}   bare {b:9.1f}   "
                    f"ratio step {h / b:.3f}  e2e {e / b:.3f}  e2e/step {e / h:.3f}",
                    flush=True,
                )
    print(
        "\nmedian harness/bare ratio at batch "
        f"{args.batch}: " + ", ".join(f"{fw} step {ratio:.3f} e2e {e2e_summary[fw]:.3f} "
                                      f"e2e/step {e2e_step_summary[fw]:.3f}" for fw, ratio in summary.items())
    )
    return 0


def progress_compare(args: argparse.Namespace, frameworks: list[str]) -> int:
    """Harness with progress (worker messages + the live display) vs without, each against bare."""
    from rich.console import Console

    from harness.cli.progress import RichProgress
    from harness.run.protocol import Progress

    print(machine_facts())
    print(f"model osu_cnn {SHAPE_TEXT}, CPU, {args.threads} thread(s), {args.warmup} warm-up + {args.steps} "
          f"timed steps per run, batch {args.batch}; progress every {args.progress_interval_s:g} s\n")
    data = synthetic_data()
    sides = ("progress", "no-progress", "bare")
    summary = {}
    for fw in frameworks:
        rows: list[dict[str, float]] = []
        print(f"{fw}, batch {args.batch}:")
        for r in range(args.repeats):
            order = _rotated(sides, r)
            res: dict[str, float] = {}
            for side in order:
                if side == "bare":
                    res[side] = _bare(fw, args)
                    continue
                if side == "no-progress":
                    out = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps,
                                        progress_interval_s=None)
                    res[side] = _step_rate(out)
                    continue
                # the display `batchscope run` shows in a terminal, drawing into memory instead of a tty
                display = RichProgress(console=Console(file=io.StringIO(), force_terminal=True, width=120))
                label: Any = SimpleNamespace(trial_hash="bench", framework=fw, batch_size=args.batch, repeat=0)
                planned = args.warmup + args.steps
                messages: list[Any] = []
                with display:
                    display.plan([label], {"bench": (planned, planned * args.batch)})
                    display.start(1, 1, label)

                    def on_event(msg: Any, display: RichProgress = display, label: Any = label,
                                 messages: list[Any] = messages) -> None:
                        messages.append(msg)
                        display.event(label, msg)

                    out = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps,
                                        on_event=on_event, progress_interval_s=args.progress_interval_s)
                res[side] = _step_rate(out)
                res["messages"] = sum(isinstance(m, Progress) for m in messages)
            rows.append(res)
            print(f"  repeat {r + 1} ({'/'.join(order)}): progress {res['progress']:8.1f}  no-progress "
                  f"{res['no-progress']:8.1f}  bare {res['bare']:8.1f} samples/s;  progress/bare "
                  f"{res['progress'] / res['bare']:.3f}  no-progress/bare {res['no-progress'] / res['bare']:.3f}  "
                  f"progress/no-progress {res['progress'] / res['no-progress']:.3f}  "
                  f"({res['messages']:.0f} progress messages)", flush=True)
        summary[fw] = (median([x["progress"] / x["bare"] for x in rows]),
                       median([x["no-progress"] / x["bare"] for x in rows]),
                       median([x["progress"] / x["no-progress"] for x in rows]))
        print(f"  medians: progress/bare {summary[fw][0]:.3f}, no-progress/bare {summary[fw][1]:.3f}, "
              f"progress/no-progress {summary[fw][2]:.3f}\n", flush=True)
    return 0



def prefetch_compare(args: argparse.Namespace, frameworks: list[str]) -> int:
    """Harness with ``prefetch`` (the default) vs without, each against bare: end-to-end and step ratios, and the
    data seconds per step the training thread still spent (issue 31, item 7). Order rotated every repeat."""
    print(machine_facts())
    print(f"model osu_cnn {SHAPE_TEXT}, CPU, {args.threads} thread(s), {args.warmup} warm-up + {args.steps} "
          f"timed steps per run, batch {args.batch}\n")
    data = synthetic_data()
    sides = ("prefetch", "no-prefetch", "bare")
    for fw in frameworks:
        rows: list[dict[str, float]] = []
        print(f"{fw}, batch {args.batch}:")
        for r in range(args.repeats):
            order = _rotated(sides, r)
            res: dict[str, float] = {}
            for side in order:
                if side == "bare":
                    res[side] = _bare(fw, args)
                    continue
                m = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps,
                                  prefetch=side == "prefetch").metrics
                assert m is not None and m.e2e_samples_per_s is not None and m.prefetch == (side == "prefetch")
                res[side], res[f"{side} step"] = m.e2e_samples_per_s, m.step_samples_per_s or 0.0
                res[f"{side} data ms"] = 1e3 * (m.data_s or 0.0) / max(m.train_steps_n, 1)
                res[f"{side} window"] = float(m.step_clock_window or 1)
            rows.append(res)
            print(f"  repeat {r + 1} ({'/'.join(order)}): e2e/bare prefetch {res['prefetch'] / res['bare']:.3f}  "
                  f"no-prefetch {res['no-prefetch'] / res['bare']:.3f};  step/bare prefetch "
                  f"{res['prefetch step'] / res['bare']:.3f}  no-prefetch {res['no-prefetch step'] / res['bare']:.3f};"
                  f"  e2e/step prefetch {res['prefetch'] / res['prefetch step']:.3f}  no-prefetch "
                  f"{res['no-prefetch'] / res['no-prefetch step']:.3f};"
                  f"  data ms/step prefetch {res['prefetch data ms']:.3f}  no-prefetch "
                  f"{res['no-prefetch data ms']:.3f}  (bare {res['bare']:.1f} samples/s)", flush=True)
            if r == 0 and res["prefetch window"] > 1:
                print(f"  (with prefetch {fw}'s steps are queued in windows of {res['prefetch window']:.0f}, without "
                      "it each is waited for: the two sides differ in both; its data ms with prefetch are waits that "
                      "overlap the queued steps' work: e2e/step says whether any left the engine idle)")
        print(f"  medians: e2e/bare prefetch {median([x['prefetch'] / x['bare'] for x in rows]):.3f}, "
              f"no-prefetch {median([x['no-prefetch'] / x['bare'] for x in rows]):.3f} (target >= 0.97); "
              f"e2e/step prefetch {median([x['prefetch'] / x['prefetch step'] for x in rows]):.3f}; "
              f"prefetch/no-prefetch e2e {median([x['prefetch'] / x['no-prefetch'] for x in rows]):.3f}\n",
              flush=True)
    return 0


#: the worker's parts ``--worker-compare`` switches off, one per side: harness_trial's keywords
WORKER_SIDES: dict[str, dict[str, Any]] = {
    "default": {},
    "no cache": {"extra_env": {"JAX_ENABLE_COMPILATION_CACHE": "false"}},  # JAX's own switch; others ignore it
    "no progress": {"progress_interval_s": None},
    "no prefetch": {"prefetch": False},
}


def worker_compare(args: argparse.Namespace, frameworks: list[str]) -> int:
    """Issue 40: the worker's step below bare while the same step in one process equals it. Each side is a harness
    trial with one of the worker's parts off (:data:`WORKER_SIDES`), against bare; order rotated every repeat; step
    and end-to-end ratios to bare, medians."""
    print(machine_facts())
    print(f"model osu_cnn {SHAPE_TEXT}, CPU, {args.threads} thread(s), {args.warmup} warm-up + {args.steps} "
          f"timed steps per run, batch {args.batch}\n")
    data = synthetic_data()
    sides = (*WORKER_SIDES, "bare")
    for fw in frameworks:
        rows: list[dict[str, float]] = []
        print(f"{fw}, batch {args.batch}:")
        for r in range(args.repeats):
            order = _rotated(sides, r)
            res: dict[str, float] = {}
            for side in order:
                if side == "bare":
                    res[side] = _bare(fw, args)
                    continue
                m = harness_trial(fw, data, args.batch, args.threads, args.warmup, args.steps,
                                  **WORKER_SIDES[side]).metrics
                assert m is not None and m.e2e_samples_per_s is not None
                res[side], res[f"{side} e2e"] = m.step_samples_per_s or 0.0, m.e2e_samples_per_s
            rows.append(res)
            print(f"  repeat {r + 1}: step/bare " + "  ".join(f"{s} {res[s] / res['bare']:.3f}" for s in WORKER_SIDES)
                  + f"   (bare {res['bare']:.1f} samples/s)", flush=True)
        print("  medians, step/bare: " + ", ".join(
            f"{s} {median([x[s] / x['bare'] for x in rows]):.3f}" for s in WORKER_SIDES)
            + "; e2e/bare: " + ", ".join(
            f"{s} {median([x[f'{s} e2e'] / x['bare'] for x in rows]):.3f}" for s in WORKER_SIDES) + "\n", flush=True)
    return 0


#: the "what helps" setting ``maxbatch --env`` offers, which every CPU worker had until issue 22
MMAP_THRESHOLD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def allocator_compare(args: argparse.Namespace, frameworks: list[str]) -> int:
    """A sweep's CPU worker environment vs the same with a fixed glibc mmap threshold, each against bare.

    Both harness sides build their environment with the sweep's own function (``common.bench_unit``); the
    threshold side adds ``MALLOC_MMAP_THRESHOLD_=131072``, which every CPU worker had until issue 22 and which is
    now a max-batch "what helps" setting (``maxbatch --env``): this measures what it costs a trial's throughput.
    Order rotated every repeat.
    """
    from harness.run.sweep import worker_allocator_env

    print(machine_facts())
    sweep_env = worker_allocator_env({})
    print(f"model osu_cnn {SHAPE_TEXT}, CPU, {args.threads} thread(s), {args.warmup} warm-up + {args.steps} "
          f"timed steps per run, batch {args.batch}; the sweep's CPU workers' allocator settings: "
          f"{sweep_env or 'none (glibc defaults)'}; threshold = {MMAP_THRESHOLD_ENV}\n")
    data = synthetic_data()
    sides = ("sweep env", "threshold", "bare")
    for fw in frameworks:
        rows: list[dict[str, float]] = []
        print(f"{fw}, batch {args.batch}:")
        for r in range(args.repeats):
            order = _rotated(sides, r)
            res: dict[str, float] = {}
            for side in order:
                if side == "bare":
                    res[side] = _bare(fw, args)
                else:
                    extra = MMAP_THRESHOLD_ENV if side == "threshold" else None
                    res[side] = _step_rate(harness_trial(fw, data, args.batch, args.threads, args.warmup,
                                                         args.steps, progress_interval_s=None, extra_env=extra))
            rows.append(res)
            print(f"  repeat {r + 1} ({'/'.join(order)}): sweep env {res['sweep env']:8.1f}  threshold "
                  f"{res['threshold']:8.1f}  bare {res['bare']:8.1f} samples/s;  sweep env/bare "
                  f"{res['sweep env'] / res['bare']:.3f}  threshold/sweep env "
                  f"{res['threshold'] / res['sweep env']:.3f}", flush=True)
        print(f"  medians: sweep env/bare {median([x['sweep env'] / x['bare'] for x in rows]):.3f}, "
              f"threshold/sweep env {median([x['threshold'] / x['sweep env'] for x in rows]):.3f}, "
              f"threshold/bare {median([x['threshold'] / x['bare'] for x in rows]):.3f}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
