"""Rows for the recommendation-rule tests, and the rule recomputed independently in plain SQL.

``tests/report/test_recommend.py`` and ``tests/report/test_answer_report.py`` write made-up sweep trials of one
experiment (:data:`EXP`, :data:`TRAIN_N` training samples) through the real store; :func:`recompute` is the rule
as docs/recommend.md states it, read straight from the store file, to compare the module's answer with.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from collections.abc import Sequence
from pathlib import Path

from adapters.base import OptimizerSpec
from harness.config.trial import TrialSpec
from harness.records import CurvePoint

EXP = "rule_test"
TRAIN_N = 4000


def sweep_trial(fw: str, bs: int, repeat: int, variant: str = "", optimizer: str = "sgd") -> TrialSpec:
    """A two-epoch CPU trial of :data:`EXP` (seed = repeat)."""
    return TrialSpec(experiment=EXP, framework=fw, model="tiny_cnn", dataset="digits", batch_size=bs,
                     repeat=repeat, seed=repeat, epochs=2, warmup_steps=1, timed_steps=3,
                     optimizer=OptimizerSpec(name=optimizer, lr=0.01), device="cpu", threads=1, timeout_s=60.0,
                     eval=True, eval_batch_size=32, variant=variant)


def even_curve(bs: int, times: Sequence[float], accs: Sequence[float]) -> list[CurvePoint]:
    """Evaluations spread evenly over 2 epochs of TRAIN_N samples at batch ``bs``."""
    steps = 2 * TRAIN_N // bs
    out = []
    for i, (t, a) in enumerate(zip(times, accs, strict=True)):
        step = steps * (i + 1) // len(times)
        out.append(CurvePoint(point=i, step=step, samples_seen=step * bs, epoch=step * bs / TRAIN_N, train_s=t,
                              accuracy=a, eval_loss=1.0 - a, eval_samples=500, eval_s=0.1))
    return out


def experiment_spec(frameworks: Sequence[str], **extra: object) -> dict[str, object]:
    """The experiment spec of the run that stored the trials (the data's classes and size)."""
    return {"name": EXP, "frameworks": list(frameworks), "epochs": 2, "lr_policy": "fixed",
            "data": {"name": "digits", "classes": 10, "n_train": TRAIN_N}, **extra}


def recompute(store_dir: Path, target_pct: float = 0.0) -> dict[str, dict[str, object]]:
    """The documented rule, independently, in plain SQL on the store file: per framework, the target (best mean final
    accuracy of the ok sweep trials minus 1 point, or ``target_pct``), each trial's training seconds to its first
    curve point at or above it (linear between that point and the one before), and the size with the least mean
    time among those where every ok repeat reached it, none diverged and the mean final accuracy is at the target;
    none where the best mean accuracy is within 5 points of chance. Returns framework -> {"batch", "times"}."""
    conn = sqlite3.connect(store_dir / "results.sqlite")
    finals = conn.execute("SELECT framework, batch_size, AVG(accuracy) FROM trials WHERE status = 'ok' AND "
                          "accuracy IS NOT NULL AND (purpose IS NULL OR purpose = 'sweep') "
                          "GROUP BY framework, batch_size").fetchall()
    final = {(fw, bs): acc for fw, bs, acc in finals}
    target = {}
    for fw, _, acc in finals:
        target[fw] = max(target.get(fw, 0.0), acc - 0.01)
    # no answer where the best mean accuracy is within 5 points of chance (1 / classes, from the run's spec)
    (spec_json,) = conn.execute("SELECT spec_json FROM runs ORDER BY run_id DESC LIMIT 1").fetchone()
    classes = (json.loads(spec_json).get("data") or {}).get("classes")
    learned = {fw: not classes or t + 0.01 - 1 / classes >= 0.05 for fw, t in target.items()}
    if target_pct:
        target = {fw: target_pct / 100 for fw in target}
    # each curve point with the point before it (SQL window function), for ok and diverged sweep trials
    rows = conn.execute("""
        SELECT t.framework, t.batch_size, t.trial_hash, t.status, c.accuracy, c.train_s,
               LAG(c.accuracy) OVER w, LAG(c.train_s) OVER w
        FROM trials t JOIN curve c USING (trial_hash)
        WHERE t.status IN ('ok', 'diverged') AND (t.purpose IS NULL OR t.purpose = 'sweep')
        WINDOW w AS (PARTITION BY c.trial_hash ORDER BY c.point)
        ORDER BY t.trial_hash, c.point""").fetchall()
    conn.close()
    reached: dict[str, float] = {}
    trials: dict[tuple[str, int], dict[str, str]] = {}
    for fw, bs, h, status, acc, t, prev_acc, prev_t in rows:
        trials.setdefault((fw, bs), {})[h] = status
        if status != "ok" or h in reached or acc < target[fw]:
            continue
        reached[h] = t if prev_acc is None else prev_t + (t - prev_t) * (target[fw] - prev_acc) / (acc - prev_acc)
    out: dict[str, dict[str, object]] = {}
    for (fw, bs), hashes in trials.items():
        times = [reached[h] for h in hashes if h in reached]
        entry = out.setdefault(fw, {"batch": None, "times": {}})
        entry["times"][bs] = statistics.fmean(times) if times else None  # type: ignore[index]
        if (learned[fw] and len(times) == len(hashes) and "diverged" not in hashes.values()
                and final[(fw, bs)] >= target[fw] - 1e-12):
            best = entry["batch"]
            if best is None or statistics.fmean(times) < entry["times"][best]:  # type: ignore[index]
                entry["batch"] = bs
    return out
