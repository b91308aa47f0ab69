"""``batchscope export`` and ``batchscope adapters``: the store's tables out as files; the adapter registry."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.table import path_arg, print_table


# ---------------------------------------------------------------- adapters
def cmd_adapters(args: argparse.Namespace) -> int:
    from harness.registry import list_adapters

    rows = [{"name": a.name, "framework": a.distribution, "installed": "yes" if a.installed else "no",
             "version": a.version or "-", "target": a.target + (f"  ({a.problem})" if a.problem else "")}
            for a in list_adapters()]
    print_table(rows, [("name", "adapter", ""), ("framework", "framework", ""), ("installed", "installed", ""),
                       ("version", "version", ""), ("target", "entry point", "")])
    return 0


# ---------------------------------------------------------------- export
def cmd_export(args: argparse.Namespace) -> int:
    from harness.store.export import export

    for path in export(Path(args.dir), args.format, Path(args.output) if args.output else None):
        print(path)
    return 0


def register(sub: Any) -> None:
    """Add the ``adapters`` and ``export`` subcommands."""
    p = sub.add_parser("adapters", help="list registered adapters (imports no framework)")
    p.set_defaults(func=cmd_adapters)

    p = sub.add_parser("export", help="export a results store to CSV or Parquet")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")
    p.add_argument("-o", "--output", type=path_arg("-o"), help="where to write (default: DIR/export)")
    p.set_defaults(func=cmd_export)
