"""Fixed cost of one trial per framework: spawn a worker, import the framework, set up, build the model.

Measured in the parent from just before the worker is spawned to the worker's ``ready`` message (the
model is built and its weights loaded; no step has run), median of ``--repeats`` trials, each in a
fresh worker. The whole trial's wall time (one training step at batch 8, no evaluation, process exit
included) is printed beside it. This is what every point of a sweep pays before it measures anything.

``--stages`` also splits each trial by the worker's own messages (their ``t`` is the worker's monotonic clock,
which the parent shares on Linux): interpreter start and harness imports (spawn -> the ``setup`` phase), loading
the adapter (-> ``hello``), the framework's import, setup, data and model build (-> ``ready``), what comes before
the first step (JAX's compilation: -> the first training phase), the steps and evaluation (-> ``result``) and the
teardown (-> the process gone), median of each.

    python benchmarks/trial_fixed_cost.py --frameworks pytorch,tensorflow,mxnet --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from common import FRAMEWORKS, frameworks_option, harness_trial, machine_facts, median, synthetic_data

STAGES = ("interpreter+imports", "adapter", "framework+setup+build", "before steps", "steps+eval", "teardown")


def one_trial(framework: str, data: Any, stages: dict[str, list[float]] | None = None) -> tuple[float, float]:
    """(seconds from spawn to ready, seconds for the whole trial): batch 8, one timed step, no eval. ``stages``:
    each stage's seconds appended (:data:`STAGES`)."""
    ready_at: list[float] = []
    marks: dict[str, float] = {}

    def on_event(msg: Any) -> None:  # a typed worker message (harness.run.protocol)
        if msg.event == "ready":
            ready_at.append(time.monotonic())
        key = msg.phase if msg.event == "phase" else msg.event
        if key in ("warmup", "timed", "train") and "train" in marks:
            return
        marks.setdefault("train" if key in ("warmup", "timed", "train") else key, float(msg.t))

    t0 = time.monotonic()
    harness_trial(framework, data, batch_size=8, threads=1, warmup=0, steps=1, on_event=on_event)
    t_end = time.monotonic()
    if stages is not None:
        points = [t0, marks.get("setup"), marks.get("hello"), marks.get("ready"), marks.get("train"),
                  marks.get("result"), t_end]
        for name, a, b in zip(STAGES, points, points[1:], strict=False):
            if a is not None and b is not None:
                stages.setdefault(name, []).append(b - a)
    return ready_at[0] - t0, t_end - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="comma-separated, from: " + ", ".join(FRAMEWORKS)
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stages", action="store_true", help="split each trial into its stages (median of each)")
    args = parser.parse_args(argv)
    frameworks = frameworks_option(parser, args.frameworks)
    print(machine_facts())
    print("osu_cnn 1x28x28, CPU, 1 thread; spawn -> ready (import + setup + build), and the whole trial\n")
    data = synthetic_data()
    for fw in frameworks:
        stages: dict[str, list[float]] = {}
        runs = [one_trial(fw, data, stages if args.stages else None) for _ in range(args.repeats)]
        ready = [r[0] for r in runs]
        total = [r[1] for r in runs]
        print(
            f"{fw:<11} fixed cost (spawn -> ready) median {median(ready):6.2f} s "
            f"[{min(ready):.2f} .. {max(ready):.2f}]   whole trial median {median(total):6.2f} s",
            flush=True,
        )
        if stages:
            print("            " + ", ".join(f"{k} {median(v):.2f} s" for k, v in stages.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
