"""The max-batch answer is one typed record from the prober to the store and back (issue 30), made of typed parts that
the store alone flattens to the ``maxbatch`` table's columns and whose JSON it alone writes and reads (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.records import (
    HeapSettling,
    MaxBatchResult,
    ProbeLog,
    ProbeResult,
    RecommendedBatch,
    SearchAnswer,
    SettleRun,
    Verification,
)
from harness.store import MAXBATCH_COLUMNS, Store, maxbatch_row
from harness.store.maxbatch_row import MAXBATCH_COLUMN_ORDER, maxbatch_record

PROBES = (ProbeResult(1, "ok", peak_mib=300.5, elapsed_s=1.5, stage="fit"),
          ProbeResult(456, "oom", reason="out of memory", stage="model", estimate_mib=((8, 3.0), (248, 63.0))),
          ProbeResult(451, "ok", peak_mib=519.0, stage="confirm", confirm=True, growth_mib=2.0))
ANSWER = MaxBatchResult(
    framework="pytorch", experiment="e", budget_mib=520.0, budget_kind="cpu-rlimit-data", strategy="model",
    adapter_options={"b": 2, "a": 1}, env={"host": "h", "gpus": []}, versions={"torch": "2.5"},
    answer=SearchAnswer(max_batch=451, fail_batch=456, fail_status="oom", capped=False, resolution="1%"),
    recommendation=RecommendedBatch(batch=440, pow2=256, mult8=440, train_env={"OMP_NUM_THREADS": "1"}),
    probes=ProbeLog(n=3, wall_s=44.5, items=PROBES),
    settling=HeapSettling(steps=100, runs=(SettleRun(440, 0, "oom"), SettleRun(374, 0, "ok"))),
    verification=Verification(steps=8, status="fail", reason="oom: x"))


def test_the_table_keeps_its_columns_in_order_with_their_types() -> None:
    names = [name for name, _ in MAXBATCH_COLUMNS]
    assert names[0] == "result_id" and names[1:] == list(MAXBATCH_COLUMN_ORDER)
    types = dict(MAXBATCH_COLUMNS)
    assert (types["max_batch"], types["budget_mib"], types["framework"]) == ("INTEGER", "REAL", "TEXT")
    assert (types["capped"], types["probes_json"], types["heap_settle_json"]) == ("INTEGER", "TEXT", "TEXT")
    assert set(maxbatch_row(MaxBatchResult())) == set(MAXBATCH_COLUMN_ORDER)  # every column comes from one field


def test_a_record_is_stored_and_read_back_whole(tmp_path: Path) -> None:
    with Store.open(tmp_path, create=True) as store:
        store.write_maxbatch(ANSWER)
        (back,) = store.maxbatch_answers("experiment = ?", ("e",))
        (row,) = store.maxbatch_results()
    assert back == ANSWER and back.verify_failed
    assert back.probes.items[1].estimate_mib == ((8, 3.0), (248, 63.0)) and back.settling.settled_batch == 374
    assert row["result_id"] >= 1 and row["max_batch"] == 451 and row["capped"] == 0  # the raw row, and its id


def test_the_json_columns_hold_the_text_the_prober_wrote_before_the_parts(tmp_path: Path) -> None:
    """The report and ``recommend`` read the columns: a record's JSON is written as the flat record's was."""
    row = maxbatch_row(ANSWER)
    assert row["probes_json"] == json.dumps([
        {"batch": p.batch, "status": p.status, "peak_mib": p.peak_mib, "reason": p.reason, "elapsed_s": p.elapsed_s,
         "stage": p.stage, "confirm": p.confirm, "growth_mib": p.growth_mib,
         "estimate_mib": [list(e) for e in p.estimate_mib], "estimate_note": p.estimate_note} for p in PROBES])
    assert row["heap_settle_json"] == json.dumps([{"batch": 440, "run": 0, "status": "oom"},
                                                  {"batch": 374, "run": 0, "status": "ok"}])
    assert row["adapter_options_json"] == '{"a": 1, "b": 2}'  # sorted, as before
    assert row["train_env_json"] == '{"OMP_NUM_THREADS": "1"}' and row["versions_json"] == '{"torch": "2.5"}'
    assert maxbatch_row(MaxBatchResult())["heap_settle_json"] is None  # no settling: NULL, as before


def test_an_old_or_hand_made_row_reads_back_with_empty_values_where_it_has_none(tmp_path: Path) -> None:
    with Store.open(tmp_path, create=True) as store:
        store.write_maxbatch(maxbatch_record({"experiment": "e", "framework": "pytorch", "max_batch": 96}))
        (back,) = store.maxbatch_answers()
    assert back.answer.max_batch == 96 and back.budget_kind == ""
    assert back.probes.wall_s is None and back.budget_mib is None  # not measured: never a 0 that looks measured
    assert back.answer.fail_batch is None and back.verification.status is None and not back.verify_failed
    assert back.recommendation.train_env is None and back.probes.items == ()  # not recorded, not "none"
    # a column this version does not know (a newer store's) is left out, not an error
    assert maxbatch_record({"result_id": 3, "framework": "jax", "a_later_column": 1}).framework == "jax"
    # unreadable JSON reads as not recorded, never as an error in the report
    broken = maxbatch_record({"probes_json": "not json", "train_env_json": "[1", "heap_settle_json": "{}"})
    assert (broken.probes.items, broken.recommendation.train_env, broken.settling.runs) == ((), None, ())
