"""``batchscope export``: the store's tables out as files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.table import path_arg


# ---------------------------------------------------------------- export
def cmd_export(args: argparse.Namespace) -> int:
    from harness.store.export import export

    for path in export(Path(args.dir), args.format, Path(args.output) if args.output else None):
        print(path)
    return 0


def register(sub: Any) -> None:
    """Add the ``export`` subcommand."""
    p = sub.add_parser("export", help="export a results store to CSV or Parquet")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")
    p.add_argument("-o", "--output", type=path_arg("-o"), help="where to write (default: DIR/export)")
    p.set_defaults(func=cmd_export)
