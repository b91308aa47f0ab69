"""The ``batch_ramp`` study's verdict (issue 52): does the ramp B_simple recommends reach the target sooner than the
best constant size?

Per framework: the ramp's trials (variant ``ramp``, planned by harness/run/ramp.py from the same store's constant
trials) and each constant size's, to the experiment's ``target_accuracy``, read from the learning curves as every
time to target is (report/answer/target.py: interpolated between the evaluations around the crossing): samples,
steps and training seconds, mean ± sd over the repeats. The best constant size is the eligible one (every repeat
reached the target and held it) with the least mean training time. The claim *holds* where the ramp's mean training
time is below the best constant size's by more than the noise (Welch's 95 % interval of the difference, as the
batch_shapes study judges), *does not hold* where it is not (or the ramp missed the target in a repeat), and *cannot
be judged* without a ramp, an eligible constant size, or two repeats of each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.store import TrialRecord
from report.answer.finding import StudyFinding, _difference
from report.answer.target import SizeTarget, seconds_fmt, size_targets

CLAIM = ("the batch-size ramp B_simple recommends reaches the target sooner (training seconds) than the best constant "
         "size")
RAMP_VARIANT = "ramp"


def _text(t: SizeTarget) -> str:
    """``5,200 ± 310 samples, 150 ± 8 steps, 4.12 ± 0.30 s`` (over the repeats that reached it), or why not."""
    if not t.reached_n or t.samples is None or t.steps is None or t.train_s is None:
        return t.text()
    reached = f" ({t.reached_n} of {t.trials_n} reached)" if t.reached_n < t.trials_n else ""
    return (f"{t.samples.text(',.0f')} samples, {t.steps.text('.0f')} steps, "
            f"{t.train_s.text(seconds_fmt(t.train_s.mean))} s{reached}")


def _schedule(rows: Sequence[TrialRecord]) -> str:
    spec = rows[0].spec if rows and isinstance(rows[0].spec, dict) else {}
    entries = spec.get("batch_schedule") or []
    if not entries:
        return "?"
    return " → ".join([str(entries[0][1])] + [f"{e[1]} at {e[0] * 100:g} %" for e in entries[1:]])


def batch_ramp(trials: Sequence[Mapping[str, Any]], curves: Mapping[str, Sequence[Mapping[str, Any]]],
               spec: Mapping[str, Any]) -> list[StudyFinding]:
    """One verdict per framework of the study (module docstring)."""
    target_pct = float(spec.get("target_accuracy") or 0.0)
    target = target_pct / 100.0 if target_pct else None
    records = [TrialRecord.of(t) for t in trials]
    out = []
    for fw in dict.fromkeys(str(t.settings.framework) for t in records):
        mine = [t for t in records if t.settings.framework == fw]
        ramp = [t for t in mine if t.settings.variant == RAMP_VARIANT]
        constant: dict[int, list[TrialRecord]] = {}
        for t in mine:
            if not t.settings.variant:
                constant.setdefault(int(t.settings.batch_size or 0), []).append(t)
        sizes = size_targets(constant, curves, target)
        at = f"to {target_pct:g} %"
        sizes_text = "; ".join(f"batch {s.batch_size}: {_text(s)}" for s in sizes)
        if target is None:
            out.append(StudyFinding("batch_ramp", fw, CLAIM, None, "no target_accuracy: nothing to reach"))
            continue
        if not ramp:
            out.append(StudyFinding("batch_ramp", fw, CLAIM, None,
                                    f"no ramp was trained (B_simple recommended none from the constant sizes: "
                                    f"`batchscope recommend` says why); constant sizes {at}: {sizes_text}"))
            continue
        (r,) = size_targets({int(ramp[0].settings.batch_size or 0): ramp}, curves, target)
        ramp_text = f"ramp {_schedule(ramp)}: {_text(r)}"
        eligible = [s for s in sizes if s.eligible and s.train_s is not None]
        if not eligible:
            out.append(StudyFinding("batch_ramp", fw, CLAIM, None,
                                    f"no constant size reached the target in every repeat and held it; {ramp_text}; "
                                    f"{sizes_text} ({at})"))
            continue
        best = min(eligible, key=lambda s: s.train_s.mean if s.train_s else float("inf"))
        assert best.train_s is not None
        evidence = f"{ramp_text}; best constant batch {best.batch_size}: {_text(best)}; all {at}: {sizes_text}"
        if not r.eligible or r.train_s is None:
            out.append(StudyFinding("batch_ramp", fw, CLAIM, False, f"the ramp did not reach the target in every "
                                                                   f"repeat and hold it: {evidence}"))
            continue
        diff, noise = _difference(best.train_s, r.train_s)
        if noise is None:
            out.append(StudyFinding("batch_ramp", fw, CLAIM, None, f"one repeat: no noise to judge a difference of "
                                                                  f"{diff:+.2f} s against; {evidence}"))
            continue
        sooner = f"{abs(diff):.2f} s {'sooner' if diff > 0 else 'later'} than batch {best.batch_size} " \
                 f"(noise ± {noise:.2f} s, Welch 95 %)"
        out.append(StudyFinding("batch_ramp", fw, CLAIM, diff > noise, f"{sooner}: {evidence}"))
    return out
