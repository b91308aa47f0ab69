"""Export a results store to CSV or Parquet (one file per table)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.diskfull import KEPT_AGAIN, says_disk_full
from harness.errors import ConfigError
from harness.store import MAXBATCH_COLUMN_NAMES, SAMPLE_COLUMNS, TRIAL_COLUMN_NAMES, Store
from harness.store.db import writable_dir
from harness.store.schema import CURVE_COLUMN_NAMES, NOISE_COLUMN_NAMES

#: every table a store holds (the schema version in ``meta`` is not data)
TABLES = ("runs", "trials", "step_times", "samples", "maxbatch", "curve", "gradient_noise")
#: the columns a store made today has: an older store read without its migration is exported with them (empty)
KNOWN_COLUMNS = {"trials": TRIAL_COLUMN_NAMES, "maxbatch": MAXBATCH_COLUMN_NAMES,
                 "samples": tuple(name for name, _ in SAMPLE_COLUMNS), "curve": CURVE_COLUMN_NAMES,
                 "gradient_noise": NOISE_COLUMN_NAMES}


def export(out_dir: Path, fmt: str, target: Path | None = None) -> list[Path]:
    """Write every table of the store in ``out_dir`` to ``target`` (default ``out_dir/export``)."""
    import pandas as pd

    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--format parquet needs pyarrow: pip install 'batchscope[report]' "
                              "(or use --format csv)") from None
    with Store.open(out_dir, create=False, readonly=True) as store:
        hint = "give -o a directory you can write" if target else \
            f"export writes into {out_dir / 'export'} by default: give -o a directory you can write"
        target = target or out_dir / "export"
        writable_dir(target, hint)
        written: list[Path] = []
        for table in TABLES:
            known = KNOWN_COLUMNS.get(table, ())
            try:
                frame = (pd.read_sql_query(f"SELECT * FROM {table}", store.conn) if store.has_table(table)
                         else pd.DataFrame(columns=list(known)))
            except (sqlite3.Error, pd.errors.DatabaseError) as e:
                raise ConfigError(f"{store.path}: cannot read table {table}: {e}") from e
            for name in known:  # an older store read as it is: the columns it lacks, empty
                if name not in frame.columns:
                    frame[name] = None
            path = target / f"{table}.{fmt}"
            tmp = path.with_suffix(path.suffix + ".tmp")
            done = ", ".join(p.name for p in written)
            kept = (f"the tables written before ({done}) are complete; " if done else "") + KEPT_AGAIN
            with says_disk_full(path, f"the {table} table", kept=kept):
                try:
                    if fmt == "csv":
                        frame.to_csv(tmp, index=False)
                    else:
                        frame.to_parquet(tmp, index=False)
                    tmp.replace(path)
                except BaseException:  # no half-written table under a name a reader would open
                    tmp.unlink(missing_ok=True)
                    raise
            written.append(path)
    return written
