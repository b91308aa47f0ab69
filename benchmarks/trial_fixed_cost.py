"""Fixed cost of one trial per framework: spawn a worker, import the framework, set up, build the model.

Measured in the parent from just before the worker is spawned to the worker's ``ready`` message (the
model is built and its weights loaded; no step has run), median of ``--repeats`` trials, each in a
fresh worker. The whole trial's wall time (one training step at batch 8, no evaluation, process exit
included) is printed beside it. This is what every point of a sweep pays before it measures anything.

    python benchmarks/trial_fixed_cost.py --frameworks pytorch,tensorflow,mxnet --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from common import FRAMEWORKS, frameworks_option, harness_trial, machine_facts, median, synthetic_data


def one_trial(framework: str, data: Any) -> tuple[float, float]:
    """(seconds from spawn to ready, seconds for the whole trial): batch 8, one timed step, no eval."""
    ready_at: list[float] = []

    def on_event(msg: dict[str, Any]) -> None:
        if msg["event"] == "ready":
            ready_at.append(time.monotonic())

    t0 = time.monotonic()
    harness_trial(framework, data, batch_size=8, threads=1, warmup=0, steps=1, on_event=on_event)
    return ready_at[0] - t0, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--frameworks", default=",".join(FRAMEWORKS), help="comma-separated, from: " + ", ".join(FRAMEWORKS)
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    frameworks = frameworks_option(parser, args.frameworks)
    print(machine_facts())
    print("osu_cnn 1x28x28, CPU, 1 thread; spawn -> ready (import + setup + build), and the whole trial\n")
    data = synthetic_data()
    for fw in frameworks:
        runs = [one_trial(fw, data) for _ in range(args.repeats)]
        ready = [r[0] for r in runs]
        total = [r[1] for r in runs]
        print(
            f"{fw:<11} fixed cost (spawn -> ready) median {median(ready):6.2f} s "
            f"[{min(ready):.2f} .. {max(ready):.2f}]   whole trial median {median(total):6.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
