"""``batchscope compare``: our numbers beside the published Ohio State ones, on the console."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from harness.cli.table import path_arg
from harness.errors import ConfigError
from harness.store import RunRecord, TrialRecord
from report.answer.thesis import (
    REFERENCE_DATASET,
    REFERENCE_EPOCHS,
    _sweep_rows,
    accuracy_meaningful,
    side_by_side,
    thesis_findings,
)


# ---------------------------------------------------------------- the command
def _cell(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _versions(trials: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Per framework, each package version its workers reported (the first seen)."""
    out: dict[str, dict[str, str]] = {}
    for t in map(TrialRecord.of, trials):
        reported = t.versions
        for pkg, ver in (reported if isinstance(reported, dict) else {}).items():
            out.setdefault(str(t.settings.framework), {}).setdefault(str(pkg), str(ver))
    return out


def render(trials: Sequence[Mapping[str, Any]], file: Any = None) -> None:
    """Print the side-by-side table and the findings for ``trials`` (one experiment's rows).

    One function (about 65 lines) because it prints one page in reading order (the header's notes, the side-by-side
    table, the math-mode note, this run's cells, the thesis's findings), each part a few lines over the same sweep
    rows; cut into helpers, that order would be spread over them.
    """
    from harness.cli.table import print_table

    rows = side_by_side(trials)
    sweep = _sweep_rows(trials)
    by_key = {(r["framework"], r["batch_size"], r["metric"]): r for r in rows}
    gpu_measured = any(r["ours"] is not None for r in rows if r["metric"] != "accuracy_pct")
    if not sweep:  # e.g. a store that holds only `batchscope maxbatch` results
        print("Ours: no sweep trials in this store (only max-batch probes, or nothing finished yet): nothing to "
              "set beside the thesis; run `batchscope run EXPERIMENT --out DIR` first.", file=file)
        return
    datasets = sorted({str(t.settings.dataset) for t in sweep})
    epochs = sorted({int(t.settings.epochs) for t in sweep if t.settings.epochs is not None})
    print(f"Ours: {len(sweep)} trial(s), data set {', '.join(datasets)}, "
          f"epochs {', '.join(map(str, epochs))}. "
          f"Thesis (Yin 2020, GTX 1060): CIFAR-10, {REFERENCE_EPOCHS} epochs.", file=file)
    from report.answer.environments import version_differences

    for note in version_differences(_versions(sweep)):
        print(f"Note: {note}.", file=file)
    if not gpu_measured:
        print("No GPU was measured in this run (CPU trials, or the sampler was off): the GPU usage and GPU "
              "memory columns are left out and not compared with the thesis.", file=file)
    same_data = datasets == [REFERENCE_DATASET]
    meaningful = all(accuracy_meaningful(d) for d in datasets)
    if not meaningful:
        print(f"Accuracy on {', '.join(datasets)} is meaningless (random data): not shown.", file=file)
    elif not same_data:
        print(f"Accuracy here is on {', '.join(datasets)}, the thesis's on CIFAR-10 (TensorFlow only): "
              "shown beside it, not differenced.", file=file)
    columns: list[tuple[str, str, str]] = [("framework", "framework", ""), ("batch_size", "batch", "d")]
    table = []
    for fw, bs in sorted({(r["framework"], r["batch_size"]) for r in rows}):
        line: dict[str, Any] = {"framework": fw, "batch_size": bs}
        for metric, short in (("gpu_util_pct", "gpu"), ("gpu_mem_mib", "mem"), ("accuracy_pct", "acc")):
            r = by_key[(fw, bs, metric)]
            ours = _cell(r["ours"], ".0f" if metric == "gpu_mem_mib" else ".1f")
            if r["ours_sd"] is not None:
                ours += f" ± {_cell(r['ours_sd'], '.0f' if metric == 'gpu_mem_mib' else '.1f')}"
            line |= {f"{short}_ours": ours, f"{short}_theirs": _cell(r["theirs"]),
                     f"{short}_diff": _signed(r["diff"])}
        table.append(line)
    groups = [("gpu", "GPU %"), ("mem", "GPU MiB")] if gpu_measured else []
    if meaningful:
        groups.append(("acc", "acc %"))
    for short, label in groups:
        columns += [(f"{short}_ours", f"{label} ours", ""), (f"{short}_theirs", "thesis", "")]
        if short != "acc" or same_data:
            columns.append((f"{short}_diff", "diff", ""))
    if table and len(columns) > 2:
        print(file=file)
        print_table(table, columns, file=file)
    from harness.cells import SUMMARY_COLUMNS, summary_note, summary_rows

    not_ieee = sorted({str(t.metrics.math_mode_seen) for t in sweep if t.status == "ok"} - {"ieee", "n/a"})
    if not_ieee:
        print(f"Math mode: trials here ran {', '.join(not_ieee)} (read back from the frameworks), the thesis's GTX "
              "1060 true float32 (it has no TF32): their speeds include the arithmetic, not the frameworks alone "
              "(math_mode = 'ieee' compares like with like; docs/precision.md).", file=file)
    print("\nThis run's cells (the statistic `batchscope run` and the report print):", file=file)
    print_table(summary_rows(sweep), SUMMARY_COLUMNS, file=file)
    print(summary_note(sweep), file=file)
    print("\nThe thesis's findings, checked on this run:", file=file)
    for f in thesis_findings(trials):
        verdict = {True: "holds", False: "does not hold", None: "not measurable"}[f["holds"]]
        print(f"  [{verdict}] {f['finding']}\n      {f['evidence']}", file=file)


def render_study(trials: Sequence[Mapping[str, Any]], spec: dict[str, Any], file: Any = None,
                 curves: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
    """A study (variants and/or ``study = ...``): per framework x variant x batch, then the study's verdicts."""
    from harness.cli.table import print_table
    from harness.run.sweep import summarise
    from report.answer.studies import STUDY_CLAIMS, study_findings, variant_names

    sweep = _sweep_rows(trials)
    variants = variant_names(sweep, spec)
    study = spec.get("study") or ""
    print(f"Study {study or '(none named)'} of experiment {spec.get('name', '?')!r}: {len(sweep)} trial(s)"
          + (f", variants {', '.join(variants)}" if variants else "") + ".", file=file)
    if study:
        print(f"Claim tested: {STUDY_CLAIMS[study]}.", file=file)
    rows = []
    for name in sorted({t.settings.variant or "" for t in sweep}):  # the one cell statistic, per variant
        mine = [t for t in sweep if (t.settings.variant or "") == name]
        effective = {(t.settings.framework, t.settings.batch_size): t.effective_batch_size for t in mine}
        rows += [r | {"variant": name, "effective": effective.get((r["framework_name"], r["batch_size"]))}
                 for r in summarise(mine)]
    print(file=file)
    print_table(rows, [("framework", "framework", ""), ("variant", "variant", ""), ("batch_size", "batch", "d"),
                       ("effective", "effective", "d"), ("status", "status", ""), ("n", "n", "d"),
                       ("arithmetic", "precision math", ""),
                       ("step_samples_per_s", "step samples/s", ""), ("e2e_samples_per_s", "e2e samples/s", ""),
                       ("rss_peak_mib", "RSS MiB", ""), ("framework_peak_mib", "fw peak MiB", ""),
                       ("accuracy_pct", "accuracy %", "")], file=file)
    verdicts = study_findings(spec, sweep, curves)
    if verdicts:
        print("\nThe study's findings, computed from these trials:", file=file)
        for f in verdicts:
            print(f"  [{f.verdict}] {f.name}: {f.claim}\n      {f.evidence}", file=file)


def _spec(runs: Sequence[RunRecord], name: str) -> dict[str, Any]:
    """The resolved experiment of the latest run of ``name`` ({} when none was recorded)."""
    for run in reversed(runs):
        if run.experiment == name and isinstance(run.spec, dict):
            return dict(run.spec)
    return {}


def cmd_compare(args: argparse.Namespace) -> int:
    """``batchscope compare DIR``."""
    from harness.store import Store

    with Store.open(args.dir, create=False, readonly=True) as store:
        trials = store.trials()
        runs = store.runs()
        curves: dict[str, list[dict[str, Any]]] = {}
        for row in store.curves():  # the learning curves a study's time to target is read from (batch_ramp)
            curves.setdefault(str(row["trial_hash"]), []).append(row)
    experiments = sorted({str(t.settings.experiment) for t in trials})
    if args.experiment:
        if args.experiment not in experiments:
            raise ConfigError(f"{args.dir}: no trials of experiment {args.experiment!r}; "
                              f"it holds: {', '.join(experiments) or 'none'}")
        experiments = [args.experiment]
    elif len(experiments) > 1:
        raise ConfigError(f"{args.dir} holds several experiments ({', '.join(experiments)}); "
                          "choose one with --experiment NAME")
    if not experiments:
        raise ConfigError(f"{args.dir}: the store holds no trials yet; run `batchscope run` into it first")
    chosen = [t for t in trials if str(t.settings.experiment) == experiments[0]]
    spec = _spec(runs, experiments[0])
    if spec.get("study") or any(t.settings.variant for t in chosen):
        # the thesis compared one setting per framework: variants would be mixed
        render_study(chosen, spec, curves=curves)
    else:
        render(chosen)
    return 0


def register(sub: Any) -> None:
    """Add ``compare`` to the CLI."""
    p = sub.add_parser("compare",
                       help="our run beside the Ohio State thesis's figures, and which findings hold")
    p.add_argument("dir", type=path_arg("DIR"), help="output directory of a run (holds results.sqlite)")
    p.add_argument("--experiment", help="which experiment, when the store holds several")
    p.set_defaults(func=cmd_compare)
