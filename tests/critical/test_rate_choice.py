"""A learning rate per size (issue 33, item 2): every size's chosen rate is the one with the fewest steps to the
target among those that reached it without diverging, recomputed here with plain SQL from the stored rows."""

from __future__ import annotations

import dataclasses
import sqlite3

from harness.config.trial import OptimizerSpec
from harness.records import CurvePoint, TrialOutcome, WorkerMetrics
from harness.store import Store
from report.answer.critical_batch import studies, study_lines
from report.load import load
from tests.conftest import make_trial

TARGET_PCT = 90.0
#: (batch, lr) -> (status, accuracies at evaluations every 10 steps); 1.0 s of training per step
RUNS = {
    (8, 0.001): ("ok", [0.5, 0.8, 0.92]),  # crosses 0.9 at step 26.7
    (8, 0.01): ("ok", [0.85, 0.95]),  # at step 15: chosen
    (8, 0.1): ("diverged", [0.95]),  # the fewest steps, but diverged: never chosen
    (32, 0.001): ("ok", [0.3, 0.5, 0.7]),  # never reached: not reached within the budget
    (32, 0.01): ("ok", [0.6, 0.88, 0.91]),  # step 26.7
    (32, 0.1): ("ok", [0.7, 0.95]),  # step 14.4: chosen
    (128, 0.001): ("ok", [0.2, 0.4]),
    (128, 0.01): ("ok", [0.93]),  # at its first evaluation, step 10: chosen (the only one)
    (128, 0.1): ("diverged", [0.1]),
}


def _outcome(batch: int, lr: float, status: str, accs: list[float]) -> TrialOutcome:
    trial = make_trial(batch_size=batch, epochs=5, optimizer=OptimizerSpec(name="adam", lr=lr),
                       variant=f"lr_{lr!r}", stop_at_accuracy=TARGET_PCT, eval_every_samples=10 * batch)
    curve = [CurvePoint(point=i, step=10 * (i + 1), samples_seen=10 * (i + 1) * batch, epoch=0.1 * (i + 1),
                        train_s=10.0 * (i + 1), accuracy=a, eval_loss=1.0, eval_samples=100, eval_s=0.1)
             for i, a in enumerate(accs)]
    return TrialOutcome(trial=trial, status=status, metrics=WorkerMetrics(accuracy=accs[-1]), curve=curve,
                        reason="eval loss is nan" if status == "diverged" else "")


def _store(path) -> None:
    with Store.open(path) as store:
        run = store.begin_run("test", {"name": "test", "frameworks": ["fake"], "epochs": 5, "train_to_target": True,
                                       "target_accuracy": TARGET_PCT, "learning_rates": [0.001, 0.01, 0.1]}, "", {})
        for (batch, lr), (status, accs) in RUNS.items():
            store.write_trial(_outcome(batch, lr, status, accs), run, {})


#: per (batch, lr) of the finished trials: the interpolated step of the first evaluation at or above the target;
#: per batch, the rate with the fewest
SQL = """
WITH pts AS (
  SELECT t.batch_size, t.lr, c.point, c.step, c.accuracy,
         LAG(c.step) OVER w AS prev_step, LAG(c.accuracy) OVER w AS prev_acc
  FROM trials t JOIN curve c ON c.trial_hash = t.trial_hash
  WHERE t.status = 'ok'
  WINDOW w AS (PARTITION BY t.trial_hash ORDER BY c.point)
), first AS (
  SELECT batch_size, lr, MIN(point) AS point FROM pts WHERE accuracy >= :target GROUP BY batch_size, lr
), reach AS (
  SELECT p.batch_size, p.lr,
         CASE WHEN p.prev_step IS NULL THEN p.step
              ELSE p.prev_step + (:target - p.prev_acc) / (p.accuracy - p.prev_acc) * (p.step - p.prev_step) END
         AS steps
  FROM pts p JOIN first f ON f.batch_size = p.batch_size AND f.lr = p.lr AND f.point = p.point
)
SELECT batch_size, lr, steps FROM reach r
WHERE steps = (SELECT MIN(steps) FROM reach r2 WHERE r2.batch_size = r.batch_size)
ORDER BY batch_size
"""


def test_every_size_s_chosen_rate_is_the_one_with_the_fewest_steps(tmp_path):
    _store(tmp_path)
    with sqlite3.connect(tmp_path / "results.sqlite") as conn:
        expected = {b: (lr, s) for b, lr, s in conn.execute(SQL, {"target": TARGET_PCT / 100})}
    assert sorted(expected) == [8, 32, 128]
    (exp,) = load(tmp_path).experiments
    (study,) = studies(exp)
    got = {s.batch_size: (s.chosen.lr, s.steps) for s in study.sizes if s.chosen is not None}
    assert got.keys() == expected.keys()
    for b, (lr, steps) in expected.items():
        assert got[b][0] == lr and abs(got[b][1] - steps) < 1e-9, (b, got[b], expected[b])
    assert expected[8][0] == 0.01  # the diverged 0.1 reached sooner and is not chosen (the SQL skips it too)
    text = "\n".join(study_lines(study))
    assert "at lr 0.01" in text and "regimes:" in text
    # 3 sizes reached: the fit exists, and the regimes are said in words
    assert study.fit is not None and "perfect scaling up to ~" in study.regimes_text()


def test_recommend_prints_and_json_carries_the_study(tmp_path, capsys):
    import json

    from harness.cli import main

    _store(tmp_path)
    assert main(["recommend", str(tmp_path), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["experiments"]
    (study,) = entry["critical_studies"]
    assert {s["batch_size"]: s["chosen_lr"] for s in study["sizes"]} == {8: 0.01, 32: 0.1, 128: 0.01}
    assert study["critical_batch"]["n"] == 3 and study["regimes"].startswith("perfect scaling up to ~")
    assert study["fastest"]["batch_size"] == 128 and study["fastest"]["lr"] == 0.01
    assert study["verdict"] is None  # no gradient noise measured
    assert main(["recommend", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "critical batch size, fake: steps to 90.0% at each size's best learning rate" in out
    assert "batch 8: 15 steps, 15.0 s at lr 0.01" in out and "time to target: batch 128" in out


def test_a_variant_named_like_a_rate_is_not_read_as_one_of_a_grid(tmp_path):
    """Issue 39: a study without a learning-rate grid whose user named a variant ``lr_warm`` keeps it out of the
    study (compared by its own recommendation), as any other named variant; it was taken for a grid rate by its
    name. The grid's rates are the experiment's ``learning_rates``, and each trial's rate its stored ``lr``."""
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test", "frameworks": ["fake"], "epochs": 5, "train_to_target": True,
                                       "target_accuracy": TARGET_PCT}, "", {})
        for (batch, lr), (status, accs) in RUNS.items():
            if lr in (0.01, 0.1):  # 0.01: the plain series; 0.1: a named variant, "lr_warm", with other results
                out = _outcome(batch, lr, status, accs)
                out.trial = dataclasses.replace(out.trial, variant="" if lr == 0.01 else "lr_warm")
                store.write_trial(out, run, {})
    (exp,) = load(tmp_path).experiments
    (study,) = studies(exp)
    assert {r.variant for s in study.sizes for r in s.tried} == {""}, [s.tried for s in study.sizes]
    assert {s.batch_size: s.chosen.lr for s in study.sizes if s.chosen} == {8: 0.01, 32: 0.01, 128: 0.01}
