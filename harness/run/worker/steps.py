"""The worker's training steps: which samples each step trains, one update timed, the loop, and its figures.

A trial's steps draw batches from the parent-written index order: warm-up steps first (not counted
in the figures), then timed steps, then (when ``epochs`` > 0) the rest of the epochs. Both throughput
figures count every post-warm-up step, timed and rest alike (:mod:`harness.run.timing`); the "timed"
phase is the window the sampler's GPU aggregates describe. Warm-up and timed steps are real training steps,
so an epoch is still every training sample seen exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adapters.base import CAPABILITIES, Adapter, capabilities
from harness.config.schedule import step_sizes
from harness.config.trial import TrialSpec
from harness.data.augment import Augmenter
from harness.run.protocol import ProgressTicker
from harness.run.timing import drift, step_figures
from harness.run.worker.prefetch import Prefetcher, with_next


def batch_indices(order: np.ndarray, batch_size: int, epochs: int, steps: int) -> Iterator[np.ndarray]:
    """Index batches: every sample once per epoch (last batch may be short); or, with ``epochs`` = 0,
    ``steps`` full batches cycling through the first order row."""
    n = order.shape[1]
    if epochs > 0:
        for e in range(epochs):
            perm = order[e]
            for start in range(0, n, batch_size):
                yield perm[start : start + batch_size]
        return
    perm = order[0]
    for step in range(steps):
        yield perm[(step * batch_size + np.arange(batch_size)) % n]


def scheduled_indices(order: np.ndarray, sizes: Sequence[tuple[int, int]]) -> Iterator[np.ndarray]:
    """Index batches of a batch-size schedule (harness.config.schedule.step_sizes: (size, epoch) per update): cut
    consecutively from each epoch's row of the seeded order, so a change of size continues the same sample stream."""
    pos, epoch = 0, 0
    for size, e in sizes:
        if e != epoch:
            pos, epoch = 0, e
        yield order[e][pos : pos + size]
        pos += size


def epoch_of(step: int, n_train: int, batch_size: int, epochs: int) -> int:
    """The epoch that step ``step`` of :func:`batch_indices` belongs to (augmentation is drawn per epoch)."""
    if epochs > 0:
        return step // -(-n_train // batch_size)
    return (step * batch_size) // n_train


def micro_batches(idx: np.ndarray, size: int) -> list[np.ndarray]:
    """An update's indices cut into micro-batches of ``size`` (the last may be shorter, as an epoch's last batch)."""
    return [idx[start : start + size] for start in range(0, len(idx), size)]


class StepRunner:
    """One optimizer update from one index batch: augment, move to the device (untimed), then train (timed).

    With ``accumulate_steps`` = k the index batch holds k micro-batches; each is moved and run through
    forward and backward in turn (only one is on the device at a time), weighted by its share of the
    samples so that the update is the one of the mean loss over all of them, then the optimizer steps once.

    With ``trial.prefetch`` (:mod:`harness.run.worker.prefetch`), :meth:`run` given the next update's indices has
    them gathered (and, where the adapter has ``prepare_batch_ahead`` and the update is one micro-batch, moved to
    the device) on a background thread while this update trains.
    """

    def __init__(self, adapter: Adapter, trial: TrialSpec, x: np.ndarray, y: np.ndarray, n_train: int) -> None:
        self.adapter, self.trial, self.x, self.y = adapter, trial, x, y
        self.augment = Augmenter(trial.augment, trial.augment_pad_px, trial.seed, n_train)
        self.n_train = n_train
        #: a batch-size schedule's (size, epoch) of every update (issue 52); empty for a constant size
        self.sizes = step_sizes(trial.schedule, n_train, trial.epochs) if trial.batch_schedule else []
        self.micro_batches_n = 0  # forward/backward passes run (equal to the updates without accumulation)
        #: the adapter moves a batch to the device ahead, on the background thread (its optional hook)
        self.device_ahead = bool(trial.prefetch) and trial.accumulate_steps == 1 and has_prepare_ahead(adapter)
        self.prefetcher = Prefetcher(self._gather_ahead, self._gather) if trial.prefetch else None
        #: post-warm-up steps queued between two clock readings (1: the clock is read after every step)
        self.window = step_window(adapter, trial.max_batch_size, x.shape[1:]) if self.device_ahead else 1

    def _host(self, idx: np.ndarray, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The samples ``idx`` gathered from the training arrays and augmented as in ``epoch`` (NumPy only)."""
        return self.augment(self.x[idx], idx, epoch), self.y[idx]

    def _gather(self, step: int, idx: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Update ``step``'s micro-batches, gathered on the host."""
        return [self._host(part, self.epoch_at(step)) for part in micro_batches(idx, self.micro_size(idx))]

    def epoch_at(self, step: int) -> int:
        """The epoch update ``step`` belongs to (augmentation is drawn per epoch)."""
        if self.sizes:
            return self.sizes[min(step, len(self.sizes) - 1)][1]
        return epoch_of(step, self.n_train, self.trial.effective_batch_size, self.trial.epochs)

    def micro_size(self, idx: np.ndarray) -> int:
        """The micro-batch an update of ``idx`` is cut into: the trial's batch under accumulation, else the update."""
        return self.trial.batch_size if self.trial.accumulate_steps > 1 else max(len(idx), 1)

    def batch_at(self, samples_seen: int) -> int:
        """The size the training trains at after ``samples_seen`` samples: the schedule entry reached (the next
        update's, where the point is at a change), or the trial's batch."""
        total = self.trial.epochs * self.n_train
        reached = [b for f, b in self.trial.schedule if round(f * total) <= samples_seen]
        return reached[-1] if reached else self.trial.batch_size


    def _gather_ahead(self, step: int, idx: np.ndarray) -> list[Any]:
        """What the background thread prepares: the host micro-batches, or the adapter's batch where it moves one
        ahead (an element that is not a (x, y) pair of arrays is a batch ready for ``train_step``)."""
        parts: list[Any] = self._gather(step, idx)
        if self.device_ahead:
            return [_Ready(self.adapter.prepare_batch_ahead(*part)) for part in parts]
        return parts

    def _batch(self, part: Any) -> Any:
        self.micro_batches_n += 1
        return part.batch if isinstance(part, _Ready) else self.adapter.prepare_batch(*part)

    def other_shapes(self) -> list[int]:
        """Batch sizes the training will prepare besides the full (micro-)batch: an epoch's short last batch.

        An adapter that compiles per shape (JAX: one XLA executable per batch size) does so in
        ``prepare_batch``; :meth:`warm_shapes` has it done before the training clock starts, with the full
        size's, so a one-time compile is not counted as training.
        """
        t = self.trial
        if t.epochs <= 0:
            return []  # full batches only (cycling through the data)
        last = self.n_train % t.effective_batch_size
        sizes = {len(part) for part in micro_batches(np.arange(last), t.batch_size)} if last else set()
        return sorted(sizes - {t.batch_size})

    def warm_shapes(self, sizes: Sequence[int] | None = None) -> None:
        """Prepare one batch of each of :meth:`other_shapes` (no training step: the weights do not change), and of
        the full (micro-)batch too where the adapter compiles per shape: its compilation is then start-up, outside
        the training clock (``compile_s``), the same whether a compilation cache was warm or not (issue 31).
        ``sizes``: these instead, where the adapter compiles per shape (a scheduled stretch's, before its first step;
        a scheduled trial's first stretch when None)."""
        per_shape = getattr(self.adapter, "compiles_per_shape", False)
        if sizes is None and self.sizes:
            first = self.trial.batch_size
            end = next((i for i, (s, _) in enumerate(self.sizes) if s > first), len(self.sizes))
            sizes = [s for s, _ in self.sizes[:end]]
        if sizes is not None:
            todo = sorted(set(sizes)) if per_shape else []
        else:
            todo = ([self.trial.batch_size] if per_shape else []) + self.other_shapes()
        for size in todo:
            idx = np.arange(size) % len(self.x)  # a batch larger than the data set cycles through it, as training does
            self.adapter.prepare_batch(self.x[idx], self.y[idx])

    def run(self, step: int, idx: np.ndarray, following: tuple[int, np.ndarray] | None = None,
            queued: bool = False) -> tuple[float, float]:
        """Run one update; returns (data seconds, step seconds). ``following``: the next update (step, indices),
        prepared in the background meanwhile where the trial prefetches. ``queued`` (only where :attr:`window` > 1):
        the step is queued, not waited for (``train_step_queued``), and its seconds are only the queueing's;
        :meth:`wait` ends the queued steps.

        The data seconds are the training thread's: gathering here (prefetch off, or the first update), or waiting
        for the background thread's result, plus ``prepare_batch`` where the adapter did not run it ahead.
        """
        t0 = time.perf_counter()
        if self.prefetcher is None:
            # one micro-batch on the host at a time, gathered just before its pass, as a plain training's loader would
            epoch = self.epoch_at(step)
            pieces = micro_batches(idx, self.micro_size(idx))
            sizes = [len(p) for p in pieces]

            def part_at(i: int) -> Any:
                return self._host(pieces[i], epoch)
        else:
            parts: list[Any] = self.prefetcher.take(step, idx)
            sizes = [len(p[0]) if not isinstance(p, _Ready) else len(idx) for p in parts]

            def part_at(i: int) -> Any:
                return parts[i]
        batch = self._batch(part_at(0))
        if self.prefetcher is not None and following is not None:
            self.prefetcher.ahead(*following)  # from here on, overlapping this update's training
        if self.trial.accumulate_steps == 1:
            t1 = time.perf_counter()
            (self.adapter.train_step_queued if queued else self.adapter.train_step)(batch)
            return t1 - t0, time.perf_counter() - t1
        data_s, step_s = time.perf_counter() - t0, 0.0
        for i, size in enumerate(sizes):
            t0 = time.perf_counter()
            batch = batch if i == 0 else self._batch(part_at(i))
            t1 = time.perf_counter()
            self.adapter.accumulate_gradients(batch, size / len(idx))
            data_s, step_s = data_s + t1 - t0, step_s + time.perf_counter() - t1
        t1 = time.perf_counter()
        self.adapter.apply_accumulated()
        return data_s, step_s + time.perf_counter() - t1

    def wait(self) -> None:
        """Return once every queued step is done (the adapter's ``wait_steps``); raises a queued step's error."""
        self.adapter.wait_steps()

    def close(self) -> None:
        """End the background thread, if any (an update prepared ahead and never trained is dropped)."""
        if self.prefetcher is not None:
            self.prefetcher.close()


@dataclass(frozen=True)
class _Ready:
    """A batch the adapter prepared ahead (``prepare_batch_ahead``): ready for ``train_step`` as it is."""

    batch: Any


def has_capability(adapter: Adapter, name: str) -> bool:
    """Whether ``adapter`` has the optional capability ``name`` (:data:`adapters.base.CAPABILITIES`); an object that
    is not an :class:`Adapter` (a test's stand-in) has it where it defines every one of the capability's hooks."""
    if isinstance(adapter, Adapter):
        return name in capabilities(type(adapter))
    hooks = next(c.hooks for c in CAPABILITIES if c.name == name)
    return all(callable(getattr(adapter, hook, None)) for hook in hooks)


def has_prepare_ahead(adapter: Adapter) -> bool:
    """Whether ``adapter`` has the optional ``prepare_batch_ahead`` hook (safe on a second thread)."""
    return has_capability(adapter, "prepare_ahead")


#: the most post-warm-up steps queued between two clock readings, and the most input bytes those steps may hold
#: beside the one a step-by-step clock holds: the window is smaller where a batch is larger, so a queued trial's
#: peak memory is within 16 MiB of a waited one's (issue 40; docs/adapters.md, "Queued steps")
MAX_STEP_WINDOW = 10
QUEUED_INPUT_BYTES = 16 * 2**20


def step_window(adapter: Adapter, batch_size: int, sample_shape: Sequence[int]) -> int:
    """How many post-warm-up steps the worker queues before reading its clock: 1 (after every step) unless the
    adapter has the ``queued_steps`` capability; then as many as keep the queued batches' inputs (float32 samples
    and int64 labels) within :data:`QUEUED_INPUT_BYTES`, at most :data:`MAX_STEP_WINDOW`."""
    if not has_capability(adapter, "queued_steps"):
        return 1
    batch_bytes = batch_size * (4 * int(np.prod(sample_shape)) + 8)
    return max(1, min(MAX_STEP_WINDOW, QUEUED_INPUT_BYTES // max(1, batch_bytes)))


@dataclass(frozen=True)
class StepPlan:
    """How many steps (optimizer updates) each training phase runs (:func:`harness.run.planner.plan_steps`)."""

    warmup_n: int
    timed_n: int
    rest_n: int

    @property
    def total_n(self) -> int:
        """Every step of the training."""
        return self.warmup_n + self.timed_n + self.rest_n

    def phase_starts(self) -> list[tuple[int, str]]:
        """(first step, phase) of each training phase, in order."""
        return [(0, "warmup"), (self.warmup_n, "timed"), (self.warmup_n + self.timed_n, "train")]


@dataclass(frozen=True)
class Trained:
    """What the training loop measured (seconds from ``time.perf_counter``, evaluation points left out)."""

    step_ms: list[float]  # every step's train time, warm-up included
    data_s: float  # batch preparation on the training thread (prefetch: the wait for the batch), summed over steps
    samples_seen: int
    post_warmup_samples: int
    train_s: float  # the first step's start to the last step's end, less the evaluation points' time
    post_warmup_s: float  # the first post-warm-up step's start to the last step's end, less the same
    stopped: bool = False  # an evaluation point stopped the training (it diverged) before the plan's end

    def phase_steps(self, plan: StepPlan) -> dict[str, int]:
        """The steps each training phase ran (the plan's, or fewer where the training stopped early)."""
        done = len(self.step_ms)
        warmup = min(plan.warmup_n, done)
        timed = min(plan.timed_n, done - warmup)
        return {"warmup": warmup, "timed": timed, "train": done - warmup - timed}


class TrainingClock:
    """Training wall seconds since :meth:`start`, with the pauses for evaluation points taken out."""

    def __init__(self) -> None:
        self.started_s = time.perf_counter()
        self.paused_s = 0.0

    def elapsed_s(self, now_s: float | None = None) -> float:
        """Training seconds up to ``now_s`` (``time.perf_counter()``; default now), pauses excluded."""
        return (time.perf_counter() if now_s is None else now_s) - self.started_s - self.paused_s

    def pause(self, during: Callable[..., bool], *args: Any) -> bool:
        """Run ``during(*args)`` (an evaluation point) off the clock; returns what it returned."""
        t0 = time.perf_counter()
        try:
            return during(*args)
        finally:
            self.paused_s += time.perf_counter() - t0


#: an evaluation point: (steps done, samples seen, training seconds so far) -> whether training goes on
AtPoint = Callable[[int, int, float], bool]


class _Window:
    """Post-warm-up steps queued since the clock was last read (``queued_steps``, :func:`step_window`).

    The clock is read when the window is closed: after the adapter's ``wait_steps``, so every queued step is done.
    Each step of the window is then given the window's mean: the wall time from the first step's queueing (its batch
    in hand) to the end of the wait, over the steps. The data waits of the later steps are inside that time: the
    engine runs the queued steps meanwhile, so a wait for a batch overlaps their work and is not subtracted (where
    the data cannot keep up, the steps' time includes the wait; ``data_s`` says how long it was).
    """

    def __init__(self, runner: StepRunner, step_ms: list[float], tick: Callable[[int, float], None]) -> None:
        self.runner, self.step_ms, self.tick = runner, step_ms, tick
        self.steps: list[int] = []
        self.started_s = 0.0

    def add(self, step: int, queued_at_s: float) -> None:
        """Step ``step`` was queued; its batch was in hand at ``queued_at_s`` (``time.perf_counter``)."""
        if not self.steps:
            self.started_s = queued_at_s
        self.steps.append(step)
        if len(self.steps) >= self.runner.window:
            self.close()

    def close(self) -> None:
        """Wait for the queued steps and give each the window's mean time (nothing queued: nothing to do)."""
        if not self.steps:
            return
        self.runner.wait()
        ended_s = time.perf_counter()
        mean_ms = (ended_s - self.started_s) * 1e3 / len(self.steps)
        for step in self.steps:
            self.step_ms.append(mean_ms)
            self.tick(step, mean_ms)
        self.steps = []


def train(runner: StepRunner, order: np.ndarray, plan: StepPlan, announce: Callable[[str], None],
          ticker: ProgressTicker, after_first_step: Callable[[], object], eval_at: Sequence[int] = (),
          at_point: AtPoint | None = None, switch_at: Mapping[int, Callable[[], object]] | None = None) -> Trained:
    """Run every step of ``plan`` through ``runner``, announcing each phase as its first step starts.

    ``after_first_step`` runs once, after the first step's clock (a precision that did not run fails there,
    not at the end); progress ticks come after each step's clock, so neither is timed. Before the step whose
    index is in ``eval_at`` (that many updates done), ``at_point`` runs off the training clock; the phase the
    training is in is announced again after it, and training stops when it returns False. Before the step whose index
    is a key of ``switch_at`` (a batch-size schedule's change, after any evaluation there), its function runs off the
    training clock too (a new learning rate; a compilation for the new size).

    Where ``runner.window`` > 1 (an adapter that queues steps), post-warm-up steps are queued and timed in windows
    (:class:`_Window`); a window also ends before an evaluation point, before a new phase and at the end, so every
    phase's steps are done when the next is announced. The first step is always waited for.
    """
    starts = plan.phase_starts()
    points = sorted(eval_at)
    phase = ""
    step_ms: list[float] = []
    data_s = 0.0
    samples_seen = post_warmup_samples = 0
    clock = TrainingClock()
    post_warmup_from_s = 0.0  # training seconds at the first post-warm-up step's start
    stopped = False
    queue_from = max(plan.warmup_n, 1) if runner.window > 1 else None  # the first step that may be queued
    window = _Window(runner, step_ms, lambda step, ms: ticker.tick(time.perf_counter(), step, phase, ms))
    # in-batch order does not change a mean loss; sorted reads are faster
    switches = dict(switch_at or {})
    t = runner.trial
    sizes = getattr(runner, "sizes", None)  # a batch-size schedule's (issue 52): the same stream, cut by it
    batches = scheduled_indices(order, sizes) if sizes else batch_indices(order, t.effective_batch_size, t.epochs,
                                                                          plan.warmup_n + plan.timed_n)
    updates = ((step, np.sort(idx)) for step, idx in enumerate(batches))
    for (step, idx), following in with_next(updates):
        if (points and points[0] == step) or (starts and starts[0][0] == step) or step in switches:
            window.close()  # the steps before an evaluation or a new phase are done before it starts
        if points and points[0] == step:
            points.pop(0)
            if at_point is not None and not clock.pause(at_point, step, samples_seen, clock.elapsed_s()):
                stopped = True
                break
            if not (starts and starts[0][0] == step):
                announce(phase)  # back from the evaluation, into the phase it interrupted
        if step in switches:
            clock.pause(lambda change: bool(change()) or True, switches.pop(step))
        while starts and starts[0][0] == step:
            phase = starts.pop(0)[1]
            announce(phase)
        if step == plan.warmup_n:
            post_warmup_from_s = clock.elapsed_s()
        queued = queue_from is not None and step >= queue_from
        before_s = time.perf_counter()
        batch_data_s, step_s = runner.run(step, idx, following, queued=queued)
        data_s += batch_data_s
        samples_seen += len(idx)
        if step >= plan.warmup_n:
            post_warmup_samples += len(idx)
        if queued:
            window.add(step, before_s + batch_data_s)
            continue
        if step == 0:
            after_first_step()
        step_ms.append(step_s * 1e3)
        ticker.tick(time.perf_counter(), step, phase, step_ms[-1])  # after the step's clock: not timed
    window.close()
    train_s = clock.elapsed_s()
    return Trained(step_ms=step_ms, data_s=data_s, samples_seen=samples_seen,
                   post_warmup_samples=post_warmup_samples, train_s=train_s,
                   post_warmup_s=train_s - post_warmup_from_s, stopped=stopped)


def train_metrics(batch_size: int, step_ms: list[float], warmup_n: int, post_warmup_s: float,
                  post_warmup_samples: int, flop_per_sample: float | None) -> dict[str, Any]:
    """Throughput and drift of the post-warm-up steps (every one of them: see :mod:`harness.run.timing`).

    ``batch_size`` is what one step trains: the effective batch (micro-batch x accumulation steps), since a
    step is one optimizer update.
    """
    measured = step_ms[warmup_n:]
    if not measured:  # a training that diverged before its first post-warm-up step: no figures to take
        return dict(train_flop_per_sample=flop_per_sample)
    fig = step_figures(measured, batch_size, post_warmup_samples, post_warmup_s)
    d = drift(measured)
    return dict(
        step_samples_per_s=fig.step_samples_per_s, e2e_samples_per_s=fig.e2e_samples_per_s,
        step_time_ms_median=fig.step_time_ms_median, step_time_ms_iqr=fig.step_time_ms_iqr,
        measured_steps_n=fig.steps_n,
        drift_change_pct=d.change_pct if d else None, drift_threshold_pct=d.threshold_pct if d else None,
        drift_flagged=d.flagged if d else None,
        train_flop_per_sample=flop_per_sample,
        # None for a native model: no description to count its FLOPs from
        achieved_gflop_per_s=None if flop_per_sample is None else flop_per_sample * fig.step_samples_per_s / 1e9,
    )
