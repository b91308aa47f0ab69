"""What live progress costs per second of training, from its parts, in CPU time (robust on a loaded machine).

``harness_overhead.py --progress-compare`` measures the whole trial with and without progress, but on a
shared 2-core machine its repeats scatter by ±15%, far more than progress could cost. This script
measures the parts in process CPU time (``time.process_time``, which other processes' load barely
moves) and adds them up per second of training:

* the worker's check after every step when no message is due (one comparison);
* a due message: encode the JSON line and write it to a pipe that a thread drains, as the executor does;
* the parent: the rich display's update for one message, and one redraw of the bars (4 a second).

    python benchmarks/progress_cost.py [--steps-per-s 100]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from harness.cli.progress import RichProgress
from harness.records import PROGRESS_INTERVAL_S
from harness.run.protocol import Channel, Progress, ProgressTicker
from tests.conftest import make_trial

REDRAWS_PER_S = 1  # RichProgress(refresh_per_second=1)


def cpu_us(fn: Callable[[int], None], n: int) -> float:
    """CPU microseconds per call of ``fn(i)`` over ``n`` calls (median of 5 rounds)."""
    rounds = []
    for _ in range(5):
        t0 = time.process_time()
        for i in range(n):
            fn(i)
        rounds.append((time.process_time() - t0) / n * 1e6)
    return sorted(rounds)[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-per-s", type=float, default=100.0,
                        help="training steps per second to cost the per-step check at (small batches: many)")
    args = parser.parse_args(argv)
    read_fd, write_fd = os.pipe()
    drained = threading.Thread(target=lambda: [None for _ in os.fdopen(read_fd, "rb")], daemon=True)
    drained.start()
    chan = Channel(write_fd)
    idle = ProgressTicker(chan, 3600.0, steps_total=10**9, steps_per_epoch=1000, epochs=5)
    idle.tick(0.0, 0, "train", 1.0)  # the first step reports; every later one is not due for an hour
    check_us = cpu_us(lambda i: idle.tick(1.0, i + 1, "train", 1.0), 200_000)
    every = ProgressTicker(chan, 0.0, steps_total=10**9, steps_per_epoch=1000, epochs=5)
    clock = itertools.count(1)  # always later than the last message, in every round: each tick sends
    send_us = cpu_us(lambda i: every.tick(float(next(clock)), i, "train", 12.5), 20_000)
    assert every.sent == 5 * 20_000, every.sent
    chan.close()

    display = RichProgress(console=Console(file=io.StringIO(), force_terminal=True, width=120))
    trial = make_trial(batch_size=64)
    display.plan([trial], {trial.trial_hash: (10**6, 64 * 10**6)})
    display.start(1, 1, trial)
    msg = Progress(t=0.0, step=1, steps_total=10**6, epoch=1, epochs=5, step_ms=12.5, phase="train")
    update_us = cpu_us(lambda i: display.event(trial, dataclasses.replace(msg, t=float(i), step=i + 1)), 5_000)
    redraw_us = cpu_us(lambda i: display.bars.refresh(), 500)
    display.close()

    per_s = (args.steps_per_s * check_us + (send_us + update_us) / PROGRESS_INTERVAL_S
             + REDRAWS_PER_S * redraw_us)
    print(f"worker: check per step {check_us:.3f} us; a due message (encode + write) {send_us:.1f} us")
    print(f"parent: display update per message {update_us:.1f} us; one redraw of the bars {redraw_us:.1f} us")
    print(f"per second of training at {args.steps_per_s:g} steps/s, a message every {PROGRESS_INTERVAL_S} s and "
          f"{REDRAWS_PER_S} redraws/s: {per_s:.0f} us of CPU = {per_s / 1e4:.3f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
