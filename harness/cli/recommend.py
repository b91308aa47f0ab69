"""``batchscope recommend DIR [--json]``: which batch size to train with, from the store alone.

The same rule and the same table as the report's first page (:mod:`report.answer.recommend`), in the terminal;
``--json`` prints every number behind it for scripts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.jsonout import dumps
from harness.cli.table import TARGET_HELP, path_arg, print_table, target_accuracy_arg


def cmd_recommend(args: argparse.Namespace) -> int:
    """Print the recommendation of every experiment in the store."""
    from harness.noise import format_estimate
    from report.answer.along import noise_along
    from report.answer.critical_batch import studies, study_lines, summary_note
    from report.answer.environments import environment_notes, environments_dict
    from report.answer.recommend import RULE_TEXT, Summary, recommend
    from report.answer.recommend_table import TABLE_COLUMNS, show_variants, table_rows
    from report.answer.studies import study_findings
    from report.load import load

    data = load(Path(args.dir))  # StoreError (exit 2) for no store, an empty one, another schema
    summary = Summary(tuple((exp.name, tuple(recommend(exp, target_accuracy=args.target_accuracy)))
                              for exp in data.experiments))
    found = {exp.name: studies(exp, target_accuracy=args.target_accuracy) for exp in data.experiments}
    along = {exp.name: noise_along(exp) for exp in data.experiments}  # issue 52: B_simple along the training, a ramp
    ramp_verdicts = {exp.name: {f.framework: f"[{f.verdict}] {f.evidence}"
                                for f in study_findings(exp.spec, exp.trials, exp.curves)}
                     for exp in data.experiments if exp.spec.get("study") == "batch_ramp"}
    if args.json:
        out = summary.to_dict()
        by_name = {exp.name: exp for exp in data.experiments}
        for entry, (_, recs) in zip(out["experiments"], summary.experiments, strict=True):
            # issue 33: each size at its best rate, the fit, the regimes, the verdict; and where that fit differs
            # from a recommendation's own, why (the same sizes count in both: SizeTarget.steps_measured)
            entry["critical_studies"] = [s.to_dict() for s in found.get(entry["experiment"], [])]
            for rec_dict, r in zip(entry["recommendations"], recs, strict=True):
                rec_dict["critical_note"] = summary_note(r, found.get(entry["experiment"], []))
            entry["noise_along"] = [a.to_dict() for a in along.get(entry["experiment"], [])]
            exp = by_name.get(entry["experiment"])
            if exp is not None:  # issue 38: where each framework ran, and what differs between them
                entry["environments"] = environments_dict(exp)
                entry["environment_notes"] = environment_notes(exp)
        print(dumps(out, indent=2))  # strict: a rate stored as inf is null with its reason, never Infinity
        return 0
    for name, recs in summary.experiments:
        print(f"experiment {name!r}: which batch size to train with")
        rows = table_rows(recs, show_variants(recs))
        print_table(rows, [(key, header, "") for key, header in TABLE_COLUMNS if key != "why"])
        for r, row in zip(recs, rows, strict=True):
            print(f"\n{row['framework']}: {row['recommended']}: {r.why}")
            if r.targets:
                print("  time to target per size: " + "; ".join(f"{t.batch_size}: {t.text()}" for t in r.targets))
            if r.critical_text():  # one reading of "reached" with the critical-batch section below
                print(f"  critical batch size: {r.critical_text()}")
            note = summary_note(r, found.get(name, []))
            if note is not None:
                print(f"  critical batch size, note: {note}")
            if r.noise is not None:
                print(f"  {format_estimate(r.noise)} (later half of each trial's training)")
            for caveat in r.caveats:
                print(f"  caveat: {caveat}")
            for what in r.to_run:
                print(f"  to be sure: {what}")
        for study in found.get(name, []):
            print("\n" + "\n".join(study_lines(study)))
        for series in along.get(name, []):
            print("\n" + "\n".join(series.lines(ramp_verdicts.get(name, {}).get(series.framework, ""))))
        print()
    print(f"rule: {RULE_TEXT}")
    return 0


def register(sub: Any) -> None:
    """Add the ``recommend`` subcommand."""
    p = sub.add_parser("recommend", help="which batch size to train with, and the largest that fits, from a "
                                         "results directory",
                       description="Reads only DIR/results.sqlite. The recommended batch size is the one that "
                                   "reaches the target accuracy in the least training time (docs/recommend.md), "
                                   "with its range over the repeats, the throughput knee beside it and the "
                                   "largest size that fits where a max-batch search ran.")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("--json", action="store_true", help="print every number behind the recommendation as JSON")
    p.add_argument("--target-accuracy", type=target_accuracy_arg, metavar="PCT", help=TARGET_HELP)
    p.set_defaults(func=cmd_recommend)
