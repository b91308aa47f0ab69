"""``batchscope export``: every table of the store, the max-batch results included."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.store import Store
from harness.store.export import TABLES, export
from harness.store.maxbatch_row import maxbatch_record


def test_every_table_of_the_store_is_exported(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        have = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        store.write_maxbatch(maxbatch_record({"experiment": "e", "framework": "pytorch", "max_batch": 96,
                                              "first_fail_batch": 97}))
    assert have - {"meta", "sqlite_sequence"} == set(TABLES)
    written = export(tmp_path, "csv")
    assert {p.stem for p in written} == set(TABLES)
    rows = pd.read_csv(tmp_path / "export" / "maxbatch.csv")
    assert rows[["framework", "max_batch", "first_fail_batch"]].values.tolist() == [["pytorch", 96, 97]]
