"""Time to a target accuracy: per trial, the training time, steps and samples to first reach it.

The field's measure of a batch size (DAWNBench and MLPerf Training score time to a target; Shallue et al. 2019
count steps to a result). Pure: reads a series' trial rows and their ``curve`` rows (:mod:`report.load`).

* **The target** (experiment key ``target_accuracy``, percent): 0, the default, means *the series' best mean
  final accuracy over its batch sizes minus* :data:`DEFAULT_MARGIN_PTS` *point*; any other value is an absolute
  accuracy in percent, the same for every series.
* **First reach**: the curve points of a trial (each evaluation on the held-out split, the last at the end of the
  training) are walked in order; at the first point at or above the target, the time, steps and samples are
  interpolated linearly between it and the point before (where the accuracy crossed the target on the straight line
  between the two measurements). When the first point is already at the target there is no earlier measurement:
  that point's values are taken (an upper bound).
* **A size** counts its finished and diverged trials: mean ± sd over the repeats that reached; *not reached in N
  epochs* when a finished trial never did; a diverged trial never reached (its accuracy means nothing), and a size
  with one is never recommended. A size is *eligible* when every repeat reached the target, none diverged, and its
  mean final accuracy is still at the target (held curves are noisy: one that touched the target at an evaluation
  and fell back by the end is not an answer to train with).
* **A size's steps are measured** (:attr:`SizeTarget.steps_measured`, the critical batch size's one reading of "a
  size reached the target") when every finished repeat reached it and none diverged: its mean steps over them go
  into the fit S = S_min (1 + B_crit / B); a size some repeat missed is left out, saying how many reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.cells import Stat
from harness.numbers import finite_or_none
from harness.store import TrialRecord

#: the default target lies this many points below the series' best mean final accuracy
DEFAULT_MARGIN_PTS = 1.0
#: a best accuracy within this many points of chance (1 / classes) means nothing was learned: no answer
CHANCE_MARGIN_PTS = 5.0
#: the statuses a size's time to target counts (others, e.g. oom or error, measured no training)
COUNTED = ("ok", "diverged")


def seconds_fmt(seconds: float) -> str:
    """A format for a time in seconds with about three significant digits (the sd printed to the same place)."""
    return ".0f" if seconds >= 100 else ".1f" if seconds >= 10 else ".2f" if seconds >= 1 else ".3f"


@dataclass(frozen=True)
class Reach:
    """Where one trial first reached the target: training seconds, optimizer steps and samples seen."""

    train_s: float
    steps: float
    samples: float
    interpolated: bool  # False: the first evaluation was already at the target (its values: an upper bound)


def first_reach(curve: Sequence[Mapping[str, Any]], target: float) -> Reach | None:
    """The first crossing of ``target`` (a fraction) along one trial's curve rows, or None if never reached."""
    prev: Mapping[str, Any] | None = None
    for point in sorted(curve, key=lambda p: int(p.get("point") or 0)):
        acc = finite_or_none(point.get("accuracy"))
        if acc is None:
            continue
        if acc >= target:
            here = (float(point["train_s"]), float(point["step"]), float(point["samples_seen"]))
            if prev is None:
                return Reach(*here, interpolated=False)
            before_acc = float(prev["accuracy"])
            before = (float(prev["train_s"]), float(prev["step"]), float(prev["samples_seen"]))
            frac = (target - before_acc) / (acc - before_acc) if acc > before_acc else 1.0
            t, s, n = (b + frac * (h - b) for b, h in zip(before, here, strict=True))
            return Reach(t, s, n, interpolated=True)
        prev = point
    return None


@dataclass(frozen=True)
class Target:
    """The target of one series: its value (fraction), how it was set, and the best mean final accuracy."""

    accuracy: float | None  # None: no accuracy was measured, so there is no target
    how: str  # "best mean - 1 point" or "absolute"
    best_mean: float | None
    best_batch: int | None
    chance: float | None  # 1 / classes where known

    @property
    def near_chance(self) -> bool:
        """Whether the best mean accuracy is within :data:`CHANCE_MARGIN_PTS` points of chance."""
        return (self.best_mean is not None and self.chance is not None
                and self.best_mean - self.chance < CHANCE_MARGIN_PTS / 100.0)

    def text(self) -> str:
        """E.g. ``97.2% (best mean 98.2% at batch 16, - 1 point)``."""
        if self.accuracy is None:
            return "none (no accuracy measured)"
        if self.how == "absolute":
            return f"{self.accuracy * 100:.1f}% (absolute, target_accuracy)"
        if self.best_mean is None:  # a relative target is made from the best mean: not reached in practice
            return f"{self.accuracy * 100:.1f}%"
        return (f"{self.accuracy * 100:.1f}% (best mean {self.best_mean * 100:.1f}% at batch {self.best_batch} "
                f"- {DEFAULT_MARGIN_PTS:g} point)")


def series_target(by_batch: Mapping[int, Sequence[TrialRecord]], target_accuracy_pct: float = 0.0,
                  classes: int | None = None) -> Target:
    """The target of one series (rows by batch size) under the experiment's ``target_accuracy`` (percent, 0: default).

    The best mean final accuracy is over each size's *finished* trials (the trial row's ``accuracy``: the last
    curve point); diverged trials are left out, their accuracy means nothing.
    """
    means = {}
    for bs, rows in by_batch.items():
        accs = [a for r in rows if r.status == "ok" and (a := finite_or_none(r.metrics.accuracy)) is not None]
        if accs:
            means[bs] = sum(accs) / len(accs)
    chance = 1.0 / classes if classes else None
    if not means:
        return Target(None, "", None, None, chance)
    best_batch = max(means, key=lambda b: (means[b], -b))
    best = means[best_batch]
    if target_accuracy_pct > 0:
        return Target(target_accuracy_pct / 100.0, "absolute", best, best_batch, chance)
    return Target(best - DEFAULT_MARGIN_PTS / 100.0, f"best mean - {DEFAULT_MARGIN_PTS:g} point", best, best_batch,
                  chance)


@dataclass(frozen=True)
class SizeTarget:
    """Time to target at one batch size of one series, over its finished and diverged repeats."""

    batch_size: int
    trials_n: int  # finished + diverged trials
    reached_n: int
    diverged_n: int
    no_curve_n: int  # finished trials with no curve row (a store made before curves)
    train_s: Stat | None
    steps: Stat | None
    samples: Stat | None
    epochs: float | None  # the epochs each trial trained (the trial's setting, else its last curve point's)
    first_point_n: int = 0  # reaches taken at the first evaluation (no earlier point to interpolate from)
    final_mean: float | None = None  # the mean final accuracy of the finished repeats (fraction)
    target: float | None = None

    @property
    def held(self) -> bool:
        """Whether the mean final accuracy is still at the target (a size that touched it and fell back is not)."""
        return self.final_mean is not None and self.target is not None and self.final_mean >= self.target - 1e-12

    @property
    def eligible(self) -> bool:
        """Reached by every finished repeat, none diverged, and still there at the end (mean final accuracy): only
        such a size may be recommended."""
        return self.reached_n > 0 and self.diverged_n == 0 and self.reached_n == self.trials_n and self.held

    @property
    def steps_measured(self) -> bool:
        """Whether this size's steps to the target are measured: every finished repeat reached it, none diverged.

        The one meaning of "a batch size reached the target" for the critical batch size's fit
        (:func:`report.answer.critical.fit_sizes`): ``recommend``'s summary, the critical-batch study's choice of a
        rate per size, the report's notes and its steps figure all read it here. A repeat that missed within its
        budget has no steps to count (they lie beyond the budget), so a mean over only the repeats that reached would
        be biased low exactly where the sizes miss; the size is left out instead, saying how many repeats reached
        (:meth:`fit_gap`). Unlike :attr:`eligible` it does not ask that the final accuracy held the target: the
        steps to the first crossing are measured either way (Shallue et al. 2019's steps to a result)."""
        return self.trials_n > 0 and self.reached_n == self.trials_n and not self.diverged_n and self.steps is not None

    def fit_gap(self) -> str:
        """Why the fit leaves this size out, e.g. ``1 of 3 repeats reached``; "" where :attr:`steps_measured`."""
        if self.steps_measured:
            return ""
        if self.diverged_n:
            return f"diverged in {self.diverged_n} of {self.trials_n} repeats"
        if self.reached_n:
            return f"{self.reached_n} of {self.trials_n} repeats reached"
        return self.text()

    def text(self) -> str:
        """``12.3 ± 0.4 s``, ``not reached in 2 epochs``, ``diverged`` or ``1 of 2 reached: 5.0 s``."""
        if self.diverged_n and not self.reached_n:
            return "diverged" if self.diverged_n == self.trials_n else \
                f"diverged ({self.diverged_n} of {self.trials_n})"
        if not self.reached_n:
            if self.no_curve_n == self.trials_n:
                return "no learning curve"
            return f"not reached in {self.epochs:g} epochs" if self.epochs else "not reached"
        assert self.train_s is not None
        value = self.train_s.text(seconds_fmt(self.train_s.mean)) + " s"
        if self.reached_n < self.trials_n:
            return (f"{self.reached_n} of {self.trials_n} reached: {value}"
                    + (f" ({self.diverged_n} diverged)" if self.diverged_n else ""))
        if not self.held and self.final_mean is not None:
            return f"{value}, then fell back (final {self.final_mean * 100:.1f}%)"
        return value

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (``recommend --json``'s ``sizes[].time_to_target``)."""
        def stat(s: Stat | None) -> dict[str, Any] | None:
            return None if s is None else {"mean": s.mean, "sd": s.sd, "n": s.n}
        return {"reached_n": self.reached_n, "trials_n": self.trials_n, "diverged_n": self.diverged_n,
                "eligible": self.eligible, "steps_measured": self.steps_measured, "train_s": stat(self.train_s),
                "steps": stat(self.steps), "samples": stat(self.samples), "epochs": self.epochs, "text": self.text()}


def size_targets(by_batch: Mapping[int, Sequence[TrialRecord]],
                 curves: Mapping[str, Sequence[Mapping[str, Any]]], target: float | None) -> list[SizeTarget]:
    """Per batch size (ascending) of one series: time, steps and samples to ``target`` (a fraction)."""
    out = []
    for bs, rows in sorted(by_batch.items()):
        counted = [r for r in rows if r.status in COUNTED]
        if not counted:
            continue
        reaches: list[Reach] = []
        epochs: list[float] = []
        no_curve = 0
        for r in counted:
            curve = curves.get(r.trial_hash, ())
            if not curve:
                no_curve += r.status == "ok"
            else:
                last = max(curve, key=lambda p: int(p.get("point") or 0))
                if (e := finite_or_none(last.get("epoch"))) is not None:
                    epochs.append(e)
            if r.status != "ok" or target is None:
                continue
            reach = first_reach(curve, target)
            if reach is not None:
                reaches.append(reach)
        # the epochs asked for (a last partial batch dropped makes the curve's last point a little short of it)
        epochs_trained = finite_or_none(counted[0].settings.epochs) or (max(epochs) if epochs else None)
        out.append(SizeTarget(
            batch_size=bs, trials_n=len(counted), reached_n=len(reaches),
            diverged_n=sum(1 for r in counted if r.status == "diverged"), no_curve_n=no_curve,
            train_s=Stat.of([x.train_s for x in reaches]), steps=Stat.of([x.steps for x in reaches]),
            samples=Stat.of([x.samples for x in reaches]),
            epochs=None if epochs_trained is None else round(epochs_trained, 2),
            first_point_n=sum(1 for x in reaches if not x.interpolated),
            final_mean=_mean([a for r in counted if r.status == "ok"
                              and (a := finite_or_none(r.metrics.accuracy)) is not None]),
            target=target))
    return out



def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
