"""Live progress of a sweep (and of max-batch probes): per trial and overall, with ETAs.

The worker sends a ``progress`` message at most every half second (:class:`harness.run.protocol.ProgressTicker`);
the executor hands each message on; this module turns them into a display:

* in a terminal, a `rich <https://rich.readthedocs.io>`_ progress display: the sweep's bar (trials done of
  planned, its ETA) and the trial's bar (steps, epoch, current step time, its ETA), finished trials
  printed as lines above the bars;
* when stdout is not a terminal, or with ``--quiet``, plain lines: one when a trial starts, one at most
  every :data:`PLAIN_EVERY_S` while it runs, one with its result, so a log or CI output stays readable.

The ETAs come from :class:`Eta`, which is pure (clock passed in) and tested on its own. A trial's ETA is
its remaining steps at the step rate it has shown so far. The sweep's ETA is the samples still planned
(steps × batch size of every trial not yet finished) at the seconds per sample that the finished trials
took, wall time included (start-up, evaluation): per sample rather than per step, because steps of
different batch sizes differ by orders of magnitude while the time per sample varies far less.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from harness.cli.table import shorten
from harness.config.trial import TrialSpec
from harness.records import TrialOutcome
from harness.run.protocol import Message, Phase, Progress

#: in plain mode, a running trial prints a progress line at most this often
PLAIN_EVERY_S = 15.0


def fmt_duration(seconds: float | None) -> str:
    """``1:02:03``, ``4:05`` or ``?`` (unknown)."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass
class _Live:
    """What is known of the trial that is running."""

    started_s: float
    steps_total: int
    first: tuple[float, int] | None = None  # (worker monotonic t, step) of the first progress message
    last: tuple[float, int] | None = None
    step_ms: float | None = None
    epoch: int = 0
    epochs: int = 0
    phase: str = "setup"


class Eta:
    """Estimates of the time left for the running trial and for the whole sweep. Pure: give it the clock."""

    def __init__(self, planned: dict[str, tuple[int, int]]) -> None:
        """``planned``: trial hash -> (planned steps, planned samples) for every trial still to run."""
        self.planned = dict(planned)
        self.done_s = 0.0  # wall seconds of finished trials that trained
        self.done_samples = 0
        self.finished: set[str] = set()
        self.live: dict[str, _Live] = {}

    def start(self, trial_hash: str, now_s: float) -> None:
        """A trial's worker was started (``now_s``: this process's monotonic clock)."""
        self.live[trial_hash] = _Live(started_s=now_s, steps_total=self.planned.get(trial_hash, (0, 0))[0])

    def event(self, trial_hash: str, msg: Message) -> None:
        """A protocol message of a running trial."""
        live = self.live.get(trial_hash)
        if live is None:
            return
        if isinstance(msg, Phase):
            live.phase = msg.phase
        elif isinstance(msg, Progress):
            point = (float(msg.t), int(msg.step))
            live.first = live.first or point
            live.last = point
            live.steps_total = int(msg.steps_total or live.steps_total)
            live.step_ms, live.phase = msg.step_ms, msg.phase or live.phase
            live.epoch, live.epochs = msg.epoch, msg.epochs

    def finish(self, trial_hash: str, elapsed_s: float, trained: bool) -> None:
        """A trial ended; ``trained``: it ran its planned steps (ok), so its time per sample is a rate."""
        self.live.pop(trial_hash, None)
        self.finished.add(trial_hash)
        if trained and trial_hash in self.planned:
            self.done_s += elapsed_s
            self.done_samples += self.planned[trial_hash][1]

    def trial_steps(self, trial_hash: str) -> tuple[int, int]:
        """(steps done, steps planned) of a running trial."""
        live = self.live.get(trial_hash)
        if live is None:
            return 0, 0
        return (live.last[1] if live.last else 0), live.steps_total

    def trial_eta_s(self, trial_hash: str) -> float | None:
        """Seconds of training left in a running trial at its step rate so far (None: no rate yet)."""
        live = self.live.get(trial_hash)
        if live is None or live.first is None or live.last is None:
            return None
        (t0, s0), (t1, s1) = live.first, live.last
        if s1 <= s0 or t1 <= t0:
            return None
        return max(live.steps_total - s1, 0) * (t1 - t0) / (s1 - s0)

    def seconds_per_sample(self) -> float | None:
        """Wall seconds per planned sample over the finished trials (None before the first)."""
        return self.done_s / self.done_samples if self.done_samples else None

    def sweep_eta_s(self, now_s: float) -> float | None:
        """Seconds left in the sweep (None until a trial has finished and given a rate)."""
        rate = self.seconds_per_sample()
        if rate is None:
            return None
        left = 0.0
        for h, (_, samples) in self.planned.items():
            if h in self.finished:
                continue
            live = self.live.get(h)
            if live is None:
                left += samples * rate
            else:  # the running trial: its own ETA when it has one, else the average less what it has run
                own = self.trial_eta_s(h)
                left += own if own is not None else max(samples * rate - (now_s - live.started_s), 0.0)
        return left


def result_text(o: TrialOutcome) -> str:
    """A finished trial in one line (the same words in both modes)."""
    m = o.metrics
    if o.status == "ok" and m is not None:
        extra = f"step {_num(m.step_samples_per_s)} / e2e {_num(m.e2e_samples_per_s)} samples/s"
        if m.drift_flagged:
            extra += f"  DRIFT {m.drift_change_pct:+.0f}% (noise {m.drift_threshold_pct:.0f}%)"
    else:
        extra = shorten(o.reason, 90)
    acc = f"  acc {m.accuracy:.3f}" if m is not None and m.accuracy is not None else ""
    p = o.placement
    gpu = f" GPU {p.device_index}" if p.device_index is not None else ""
    where = f" on {p.host}{gpu}" if p.node_id else ""  # a Ray run: which node it ran on
    return f"{o.status:<8} {extra}{acc}  ({o.elapsed_s:.1f} s{where})"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def trial_label(trial: TrialSpec) -> str:
    """``pytorch     bs=64    rep 1``; a batch-size schedule's sizes as ``bs=16→64→256``."""
    variant = f" {trial.variant}" if trial.variant else ""
    sizes = "→".join(str(b) for _, b, _ in trial.batch_schedule) if trial.batch_schedule else str(trial.batch_size)
    return f"{trial.framework:<11}{variant} bs={sizes:<5} rep {trial.repeat}"


def _live_text(eta: Eta, trial_hash: str, steps: bool = True) -> str:
    live = eta.live.get(trial_hash)
    if live is None:
        return ""
    done, total = eta.trial_steps(trial_hash)
    parts = [live.phase]
    if total and steps:
        parts.append(f"step {done}/{total} ({100 * done / total:.0f}%)")
    if live.epochs:
        parts.append(f"epoch {live.epoch}/{live.epochs}")
    if live.step_ms is not None:
        parts.append(f"{live.step_ms:.1f} ms/step")
    parts.append(f"trial ETA {fmt_duration(eta.trial_eta_s(trial_hash))}")
    return ", ".join(parts)


def _sweep_eta_text(eta: Eta, now_s: float) -> str:
    left = eta.sweep_eta_s(now_s)
    return "sweep ETA after the first trial" if left is None else f"sweep ETA {fmt_duration(left)}"


def _counter(i: int, n: int) -> str:
    """``[  3/20]`` in a sweep; ``[probe 3]`` where the number of trials is not known (max-batch probes)."""
    return f"[{i:>3}/{n}]" if n else f"[probe {i}]"


class PlainProgress:
    """Line-by-line progress for logs, CI and ``--quiet``: a start line, a line every PLAIN_EVERY_S, a result."""

    def __init__(self, stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic,
                 every_s: float = PLAIN_EVERY_S) -> None:
        self.stream = stream or sys.stdout
        self.clock, self.every_s = clock, every_s
        self.eta = Eta({})
        self.n = 0
        self._next_line_s = 0.0

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def line(self, text: str) -> None:
        """Print a line of the command's own (above the bars in a terminal, so they are not garbled)."""
        self._print(text)

    def plan(self, todo: Sequence[TrialSpec], planned: dict[str, tuple[int, int]]) -> None:
        """The trials still to run, with their planned (steps, samples)."""
        self.eta = Eta(planned)
        steps = sum(s for s, _ in planned.values())
        self._print(f"{len(todo)} trial(s) to run, {steps:,} training steps planned")

    def start(self, i: int, n: int, trial: TrialSpec) -> None:
        """Trial ``i`` of ``n`` starts."""
        self.n = n
        now = self.clock()
        self.eta.start(trial.trial_hash, now)
        self._next_line_s = now + self.every_s
        self._print(f"{_counter(i, n)} {trial_label(trial)} running...")

    def event(self, trial: TrialSpec, msg: Message) -> None:
        """A worker message of the running trial; prints a progress line when one is due."""
        self.eta.event(trial.trial_hash, msg)
        now = self.clock()
        if isinstance(msg, Progress) and now >= self._next_line_s:
            self._next_line_s = now + self.every_s
            tail = f", {_sweep_eta_text(self.eta, now)}" if self.n else ""
            self._print(f"        {trial_label(trial)} {_live_text(self.eta, trial.trial_hash)}{tail}")

    def done(self, i: int, n: int, o: TrialOutcome, text: str | None = None) -> None:
        """Trial ``i`` of ``n`` ended (or was skipped); ``text`` replaces the standard result words."""
        self.eta.finish(o.trial.trial_hash, o.elapsed_s, o.status == "ok")
        tail = f"  {_sweep_eta_text(self.eta, self.clock())}" if i < n else ""
        self._print(f"{_counter(i, n)} {trial_label(o.trial)} {text or result_text(o)}{tail}")

    def close(self) -> None:
        """Nothing to tear down."""

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RichProgress(PlainProgress):
    """The terminal display: the sweep's bar and the running trial's bar, results printed above them.

    Rich redraws from a thread of its own once a second (a redraw costs ~4 ms of CPU on the 2-core
    development machine, so 4 a second took 1.7% of a core from the worker; docs/benchmarks.md).
    """

    def __init__(self, console: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        super().__init__(clock=clock)
        self.console = console or Console()
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(bar_width=28), MofNCompleteColumn(),
                             TimeElapsedColumn(), TextColumn("{task.fields[info]}"), console=self.console,
                             refresh_per_second=1, transient=True)  # see the class docstring: why 1/s
        self.sweep_task = self.bars.add_task("sweep", total=None, info="", visible=False)  # shown by plan()
        self.trial_task = self.bars.add_task("trial", total=None, info="", visible=False)
        self._started = False
        self._running: dict[str, str] = {}  # trial hash: its bar's description (Ray runs several at once)

    def _print(self, text: str) -> None:
        self.bars.console.print(text, highlight=False, markup=False)

    def _ensure_started(self) -> None:
        if not self._started:
            self.bars.start()
            self._started = True

    def plan(self, todo: Sequence[TrialSpec], planned: dict[str, tuple[int, int]]) -> None:
        super().plan(todo, planned)
        self._ensure_started()
        self.bars.update(self.sweep_task, total=len(todo), completed=0, visible=True,
                         info="sweep ETA after the first trial")

    def start(self, i: int, n: int, trial: TrialSpec) -> None:
        self._ensure_started()
        self.n = n
        self.eta.start(trial.trial_hash, self.clock())
        total = self.eta.trial_steps(trial.trial_hash)[1] or None
        self._running[trial.trial_hash] = f"{_counter(i, n)} {trial_label(trial)}"
        self.bars.reset(self.trial_task, total=total, completed=0, visible=True,
                        description=self._description(), info="setup")

    def _description(self) -> str:
        """The trial bar's label: the running trial, or (several at once, on Ray) how many and the latest; their
        steps are not relayed from the nodes, so the bar then counts only what ended."""
        latest = next(reversed(self._running.values()), "")
        return latest if len(self._running) <= 1 else f"{len(self._running)} running, latest {latest}"

    def event(self, trial: TrialSpec, msg: Message) -> None:
        self.eta.event(trial.trial_hash, msg)
        if not isinstance(msg, (Progress, Phase)):
            return
        done, total = self.eta.trial_steps(trial.trial_hash)
        self.bars.update(self.trial_task, completed=done, total=total or None,
                         info=_live_text(self.eta, trial.trial_hash, steps=False))
        if self.n:
            self.bars.update(self.sweep_task, info=_sweep_eta_text(self.eta, self.clock()))

    def done(self, i: int, n: int, o: TrialOutcome, text: str | None = None) -> None:
        self.eta.finish(o.trial.trial_hash, o.elapsed_s, o.status == "ok")
        self._print(f"{_counter(i, n)} {trial_label(o.trial)} {text or result_text(o)}")
        if n:
            self.bars.update(self.sweep_task, advance=1, info=_sweep_eta_text(self.eta, self.clock()))
        self._running.pop(o.trial.trial_hash, None)
        if self._running:
            self.bars.update(self.trial_task, description=self._description())
        else:
            self.bars.update(self.trial_task, visible=False)

    def close(self) -> None:
        if self._started:
            self.bars.stop()
            self._started = False


def make_progress(quiet: bool = False, stream: IO[str] | None = None) -> PlainProgress:
    """The display for this output: rich bars on a terminal, plain lines otherwise or with ``quiet``."""
    stream = stream or sys.stdout
    if not quiet and stream.isatty():
        return RichProgress()
    return PlainProgress(stream)


def planned_work(todo: Sequence[TrialSpec], n_train: int) -> dict[str, tuple[int, int]]:
    """trial hash -> (planned steps, planned samples) for the ETAs."""
    from harness.run.planner import planned_steps

    out = {}
    for t in todo:
        steps = planned_steps(t, n_train)
        samples = t.epochs * n_train if t.epochs else steps * t.batch_size
        out[t.trial_hash] = (steps, samples)
    return out
