"""``batchscope recommend DIR [--json]``: which batch size to train with, from the store alone.

The same rule and the same table as the report's first page (:mod:`report.recommend`), in the terminal;
``--json`` prints every number behind it for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.cli.table import path_arg, print_table


def cmd_recommend(args: argparse.Namespace) -> int:
    """Print the recommendation of every experiment in the store."""
    from report.load import load
    from report.recommend import RULE_TEXT, TABLE_COLUMNS, Summary, recommend, show_variants, table_rows

    data = load(Path(args.dir))  # StoreError (exit 2) for no store, an empty one, another schema
    summary = Summary(tuple((exp.name, tuple(recommend(exp))) for exp in data.experiments))
    if args.json:
        json.dump(summary.to_dict(), sys.stdout, indent=2)
        print()
        return 0
    for name, recs in summary.experiments:
        print(f"experiment {name!r}: which batch size to train with")
        rows = table_rows(recs, show_variants(recs))
        print_table(rows, [(key, header, "") for key, header in TABLE_COLUMNS if key != "why"])
        for r, row in zip(recs, rows, strict=True):
            print(f"\n{row['framework']}: {row['recommended']}: {r.why}")
            for caveat in r.caveats:
                print(f"  caveat: {caveat}")
            for what in r.to_run:
                print(f"  to be sure: {what}")
        print()
    print(f"rule: {RULE_TEXT}")
    return 0


def register(sub: Any) -> None:
    """Add the ``recommend`` subcommand."""
    p = sub.add_parser("recommend", help="which batch size to train with, and the largest that fits, from a "
                                         "results directory",
                       description="Reads only DIR/results.sqlite. The recommended batch size is the smallest "
                                   "whose throughput is within a stated share of the best (docs/recommend.md), "
                                   "with its range over the repeats, its accuracy cost and the largest size "
                                   "that fits where a max-batch search ran.")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("--json", action="store_true", help="print every number behind the recommendation as JSON")
    p.set_defaults(func=cmd_recommend)
