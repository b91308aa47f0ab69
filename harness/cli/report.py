"""``batchscope report DIR [-o report.pdf]``: the PDF report of a results directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.table import TARGET_HELP, path_arg, target_accuracy_arg

#: where the report goes without -o, under DIR (report.document.build.default_output, not imported: it loads matplotlib)
DEFAULT_REPORT = Path("report") / "report.pdf"


def cmd_report(args: argparse.Namespace) -> int:
    """Build the report and say where its files are."""
    from harness.errors import OutputError, StoreError
    from harness.store.db import writable_dir
    from report.load import load

    # bad input is refused before matplotlib/seaborn/pandas/reportlab are imported (seconds of start-up)
    load(Path(args.dir))
    if args.output and Path(args.output).suffix.lower() != ".pdf":
        raise StoreError(f"{args.output}: the report is a PDF; give -o a path ending in .pdf")
    if args.output and Path(args.output).exists() and not Path(args.output).is_file():
        # checked before figures are drawn beside it, so nothing is left half-written
        raise OutputError(f"{args.output}: exists and is not a file (a directory?); give -o the path of a PDF file")
    # a store shared read-only is normal: the report cannot go beside it, so say where it would and what to do
    target = Path(args.output) if args.output else Path(args.dir) / DEFAULT_REPORT
    writable_dir(target.parent, "give -o a path in a directory you can write" if args.output else
                 f"the report goes to {target} by default: give -o a path in a directory you can write")
    from report.document.build import build_report

    result = build_report(Path(args.dir), Path(args.output) if args.output else None,
                          target_accuracy=args.target_accuracy)
    print(f"report: {result.pdf}")
    if result.figures:
        print(f"figures: {len(result.figures)} file(s) in {result.figures[0].parent}")
    if result.tables:
        print(f"tables: {len(result.tables)} CSV file(s) in {result.tables[0].parent}")
    for line in result.absent:
        print(f"not drawn: {line}")
    return 0


def register(sub: Any) -> None:
    """Add the ``report`` subcommand."""
    p = sub.add_parser("report", help="write the PDF report (figures, tables, findings) of a results directory",
                       description="Reads only DIR/results.sqlite (no framework, no GPU) and writes the PDF, "
                                   "its figures (PNG and SVG) and its tables (CSV) beside it.")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("-o", "--output", type=path_arg("-o"),
                   help="PDF to write (default: DIR/report/report.pdf); figures/ and tables/ go in the same folder")
    p.add_argument("--target-accuracy", type=target_accuracy_arg, metavar="PCT", help=TARGET_HELP)
    p.set_defaults(func=cmd_report)
