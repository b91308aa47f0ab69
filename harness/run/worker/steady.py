"""The steady phase: a few seconds of training steps after the final evaluation, on a GPU, off the headline clock.

NVML averages GPU utilisation over its last 1/6-1 s and, on Ampere and newer, power over the last second, so a timed
phase of a few milliseconds (a small model on a fast GPU) cannot be read (harness/monitor/windows.py withholds such
readings). The steady phase gives the sampler a window it can read: the worker announces ``steady``, runs training
steps on full batches (cycling through the first epoch's order) until ``steady_s`` seconds have passed, then
announces ``finish``, so that the window ends with the last step and not with the worker's exit. Its steps count
nowhere but here: not in the step times, the throughput, ``train_s`` or the learning curve (the final evaluation
came before them); the result's ``phase_steps["steady"]`` says how many ran, for the steady J/sample.

It runs only where the trial ran on a GPU (the adapter's setup reported a ``gpu_name``): on a CPU the sampler reads
no GPU, and steps there would only cost time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from harness.monitor.windows import FINISH_PHASE, STEADY_PHASE
from harness.run.protocol import SetupFacts
from harness.run.worker.prefetch import with_next
from harness.run.worker.steps import StepRunner, batch_indices


def run_steady(runner: StepRunner, order: np.ndarray, steady_s: float, facts: SetupFacts, first_step: int,
               announce: Callable[[str], None], clock: Callable[[], float] = time.perf_counter) -> int:
    """Run training steps for ``steady_s`` seconds in the announced ``steady`` phase (on a GPU only); returns how
    many ran (0 where none did). ``first_step`` numbers the first one (augmentation draws per step's epoch)."""
    if steady_s <= 0 or not facts.on_gpu:
        return 0
    announce(STEADY_PHASE)
    deadline = clock() + steady_s
    steps = 0
    updates = ((first_step + i, np.sort(idx)) for i, idx in
               enumerate(batch_indices(order, runner.trial.effective_batch_size, 0, 2**62)))
    for (step, idx), following in with_next(updates):
        runner.run(step, idx, following)  # the next batch prepared meanwhile where the trial prefetches
        steps += 1
        if clock() >= deadline:
            break
    announce(FINISH_PHASE)
    return steps
