"""Export a results store to CSV or Parquet (one file per table)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.errors import ConfigError
from harness.store import Store

#: every table a store holds (the schema version in ``meta`` is not data)
TABLES = ("runs", "trials", "step_times", "samples", "maxbatch", "curve")


def export(out_dir: Path, fmt: str, target: Path | None = None) -> list[Path]:
    """Write every table of the store in ``out_dir`` to ``target`` (default ``out_dir/export``)."""
    import pandas as pd

    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--format parquet needs pyarrow: pip install 'batchscope[report]' "
                              "(or use --format csv)") from None
    target = target or out_dir / "export"
    with Store.open(out_dir, create=False) as store:
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for table in TABLES:
            try:
                frame = pd.read_sql_query(f"SELECT * FROM {table}", store.conn)
            except (sqlite3.Error, pd.errors.DatabaseError) as e:
                raise ConfigError(f"{store.path}: cannot read table {table}: {e}") from e
            path = target / f"{table}.{fmt}"
            tmp = path.with_suffix(path.suffix + ".tmp")
            if fmt == "csv":
                frame.to_csv(tmp, index=False)
            else:
                frame.to_parquet(tmp, index=False)
            tmp.replace(path)
            written.append(path)
    return written
