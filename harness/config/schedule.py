"""A batch-size schedule (issue 52; experiment key ``batch_schedule``): what it means, checked, and the steps it makes.

``batch_schedule = [[0, 16], [0.25, 64], [0.6, 256]]``: pairs ``[fraction, batch size]``. From the step at which the
samples seen first reach ``fraction`` of the training's samples (``epochs`` x the training set), each update trains
``batch size`` samples. The fractions start at 0, rise strictly and stay below 1; the sizes are whole numbers > 0.

How the sample stream continues across a change: the data order is the trial's seeded order, one permutation per
epoch as for a constant size. Batches are cut from it consecutively; an epoch's last batch is short (as a constant
size's is), and the next epoch starts a fresh permutation. A change never skips or repeats a sample: it takes effect
at the first update that starts at or after its sample count, and that update starts where the previous one ended.
So a schedule of one entry ``[[0, B]]`` trains exactly the steps of ``batch_size = B``.

Where every training evaluates, a constant size's as a schedule's, is here too (:func:`eval_steps`, the one rule: the
first step at which the samples seen reach each point's count). Framework-free and pure Python: the parent plans and
checks with it, the worker trains and evaluates by it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

Schedule = tuple[tuple[float, int], ...]
#: a training's updates in order, run-length coded: (samples per update, how many such updates in a row)
Updates = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Segment:
    """One stretch of a scheduled training at one batch size: its first step and the samples seen before it."""

    index: int
    batch: int
    first_step: int
    first_sample: int
    steps: int  # updates in this stretch (the last ones of an epoch may be short)
    samples: int


def parse_schedule(value: object) -> Schedule:
    """``value`` (from TOML) as a schedule, or ValueError saying what is wrong with it (the caller names the key)."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("should be a non-empty list of [fraction, batch size] pairs, e.g. [[0, 16], [0.5, 64]]")
    out: list[tuple[float, int]] = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"entry {i} is {pair!r}: each entry is a [fraction, batch size] pair")
        fraction, size = pair
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ValueError(f"entry {i}: the fraction {fraction!r} is not a number")
        if isinstance(size, bool) or not isinstance(size, int):
            raise ValueError(f"entry {i}: the batch size {size!r} is not a whole number")
        out.append((float(fraction), size))
    check_schedule(tuple(out))
    return tuple(out)


def check_schedule(schedule: Schedule) -> None:
    """ValueError unless the fractions start at 0, rise strictly inside [0, 1) and every size is > 0."""
    for i, (fraction, size) in enumerate(schedule):
        if size <= 0:
            raise ValueError(f"entry {i}: batch size {size} must be > 0")
        if not 0.0 <= fraction < 1.0:
            raise ValueError(f"entry {i}: fraction {fraction} is outside [0, 1) (fractions of the training's samples; "
                             "at 1 the training is over)")
        if i == 0 and fraction != 0.0:
            raise ValueError(f"the first entry's fraction is {fraction}: it must be 0 (the size the training "
                             "starts at)")
        if i and fraction <= schedule[i - 1][0]:
            raise ValueError(f"entry {i}: fraction {fraction} does not increase (the one before is "
                             f"{schedule[i - 1][0]})")


def schedule_text(schedule: Schedule) -> str:
    """``16 -> 64 at 25 % -> 256 at 60 %``: how messages and the report name a schedule."""
    parts = [str(schedule[0][1])] + [f"{b} at {f * 100:g} %" for f, b in schedule[1:]]
    return " → ".join(parts)


def step_sizes(schedule: Schedule, n_train: int, epochs: int) -> list[tuple[int, int]]:
    """(batch size, epoch) of every update of a scheduled training of ``epochs`` over ``n_train`` samples."""
    total = epochs * n_train
    starts = [round(f * total) for f, _ in schedule]
    out: list[tuple[int, int]] = []
    seen = pos = epoch = k = 0
    while seen < total:
        while k + 1 < len(schedule) and seen >= starts[k + 1]:
            k += 1
        size = min(schedule[k][1], n_train - pos)
        out.append((size, epoch))
        seen += size
        pos += size
        if pos == n_train:
            pos, epoch = 0, epoch + 1
    return out


def segments(schedule: Schedule, n_train: int, epochs: int) -> list[Segment]:
    """The stretches of the training at each scheduled size (an entry whose stretch is empty is left out)."""
    total = epochs * n_train
    starts = [round(f * total) for f, _ in schedule]
    out: list[Segment] = []
    seen = 0
    k = 0
    for step, (size, _) in enumerate(step_sizes(schedule, n_train, epochs)):
        while k + 1 < len(schedule) and seen >= starts[k + 1]:
            k += 1
        if not out or out[-1].index != k:
            out.append(Segment(index=k, batch=schedule[k][1], first_step=step, first_sample=seen, steps=0,
                               samples=0))
        last = out[-1]
        out[-1] = Segment(last.index, last.batch, last.first_step, last.first_sample, last.steps + 1,
                          last.samples + size)
        seen += size
    return out


def constant_updates(batch: int, n_train: int, epochs: int, steps: int) -> Updates:
    """A constant size's updates as :data:`Updates`: ``batch`` samples each, an epoch's last one short where
    ``batch`` does not divide ``n_train`` (as harness.run.worker.steps.batch_indices cuts them); with ``epochs`` = 0,
    ``steps`` full batches (cycling through the data). The one-stretch schedule ``[[0, batch]]`` cuts the same."""
    if epochs <= 0:
        return ((batch, steps),) if steps > 0 else ()
    full, last = divmod(n_train, batch)
    if not last or not full:  # every update of one size: full batches only, or the whole set at once each epoch
        return ((batch, full * epochs),) if full else ((last, epochs),)
    return ((batch, full), (last, 1)) * epochs


def schedule_updates(schedule: Schedule, n_train: int, epochs: int) -> Updates:
    """A schedule's updates (:func:`step_sizes`) as :data:`Updates`."""
    out: list[tuple[int, int]] = []
    for size, _ in step_sizes(schedule, n_train, epochs):
        if out and out[-1][0] == size:
            out[-1] = (size, out[-1][1] + 1)
        else:
            out.append((size, 1))
    return tuple(out)


def eval_steps(updates: Updates, points_n: int = 0, every_samples: int = 0) -> list[int]:
    """The steps (updates done) after which a training evaluates: **the one rule**, for constant sizes and schedules
    alike (a constant size is a one-stretch schedule), for ``eval_points`` and for train-to-target's cadence.

    Each point has a sample count: every multiple of ``every_samples`` (train-to-target mode), else ``points_n``
    counts spread evenly over the training's samples (``round(i x samples / (points_n + 1))``). A point falls after the
    first step at which the samples seen reach its count; strictly inside the training (its end is the final
    evaluation), each step once (counts that the same step reaches are one point). In samples, not steps, so that a
    small-batch stretch does not crowd them, and so that ``[[0, B]]`` and ``batch_size = B`` evaluate after the same
    steps (before, a constant size spread its points over its steps, and evaluated every ``round(samples / B)``
    steps to the target: up to a step apart at each point, and drifting apart over a train-to-target run).

    ``updates``: the training's updates in order (:func:`constant_updates`, :func:`schedule_updates`). The work is
    one pass over them and the points (never one per step or per sample: a training may have 10^9 steps).
    """
    total = sum(size * count for size, count in updates)
    steps = sum(count for _, count in updates)
    if every_samples > 0:
        def after(samples: int) -> int:  # the first count above ``samples``
            return (samples // every_samples + 1) * every_samples
    else:
        marks = sorted({round(i * total / (points_n + 1)) for i in range(1, points_n + 1)})

        def after(samples: int) -> int:
            k = bisect.bisect_right(marks, samples)
            return marks[k] if k < len(marks) else total
    out: list[int] = []
    run = first_step = first_sample = 0  # the run of updates that holds the next point, and what came before it
    mark = after(0)
    while mark < total:
        while first_sample + updates[run][0] * updates[run][1] < mark:  # the run whose samples reach the mark
            first_step += updates[run][1]
            first_sample += updates[run][0] * updates[run][1]
            run += 1
        size = updates[run][0]
        step = first_step + -(-(mark - first_sample) // size)
        if step >= steps:
            break
        out.append(step)
        mark = after(first_sample + (step - first_step) * size)  # the counts this step reached are this point
    return out
