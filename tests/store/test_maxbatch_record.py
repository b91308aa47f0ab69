"""The max-batch answer is one typed record from the prober to the store and back (issue 30)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.errors import StoreError
from harness.records import MaxBatchResult
from harness.store import MAXBATCH_COLUMNS, Store


def test_the_table_has_one_column_per_field_after_the_id() -> None:
    names = [name for name, _ in MAXBATCH_COLUMNS]
    assert names[0] == "result_id" and names[1:] == [f.name for f in dataclasses.fields(MaxBatchResult)]
    types = dict(MAXBATCH_COLUMNS)
    assert (types["max_batch"], types["budget_mib"], types["framework"]) == ("INTEGER", "REAL", "TEXT")


def test_a_record_is_stored_and_read_back_whole(tmp_path: Path) -> None:
    answer = MaxBatchResult(framework="pytorch", experiment="e", max_batch=451, first_fail_batch=456,
                            budget_mib=520.0, budget_kind="cpu-rlimit-data", probes_n=7, wall_s=44.5,
                            strategy="model", resolution="1%", verify_status="fail", verify_reason="oom: x")
    with Store.open(tmp_path, create=True) as store:
        store.write_maxbatch(answer)
        (back,) = store.maxbatch_answers("experiment = ?", ("e",))
        (row,) = store.maxbatch_results()
    assert back == answer and back.verify_failed
    assert row["result_id"] >= 1 and row["max_batch"] == 451  # the raw row: the same numbers, and its id


def test_an_old_or_hand_made_row_reads_back_with_empty_values_where_it_has_none(tmp_path: Path) -> None:
    with Store.open(tmp_path, create=True) as store:
        store.write_maxbatch({"experiment": "e", "framework": "pytorch", "max_batch": 96})
        (back,) = store.maxbatch_answers()
    assert back.max_batch == 96 and back.budget_kind == ""
    assert back.wall_s is None and back.budget_mib is None  # not measured: never a 0 that looks measured
    assert back.first_fail_batch is None and back.verify_status is None and not back.verify_failed
    # a column this version does not know (a newer store's) is left out, not an error
    assert MaxBatchResult.from_row({"result_id": 3, "framework": "jax", "a_later_column": 1}).framework == "jax"


def test_a_row_with_an_unknown_column_is_refused(tmp_path: Path) -> None:
    with Store.open(tmp_path, create=True) as store, pytest.raises(StoreError, match="unknown column"):
        store.write_maxbatch({"framework": "pytorch", "max_batch_size": 96})
