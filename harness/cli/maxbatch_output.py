"""What ``batchscope maxbatch`` prints about a search: the bracket as it narrows, the forecast before the first
probe, the answer and the recommendation (:mod:`harness.cli.maxbatch` runs it; its names are importable there)."""

from __future__ import annotations

import sys
from typing import Any

from harness.records import MaxBatchResult


def _fmt_int(value: int | None) -> str:
    return "-" if value is None else str(value)


def bracket_line(probe: Any, lo: int, hi: int | None) -> str:
    """One probe's line as the search narrows: what it found and the bracket it left (``lo`` fits, ``hi`` fails)."""
    what = "fits" if probe.status == "ok" else "out of memory" if probe.status == "oom" else probe.status
    kind = "confirm" if probe.confirm else probe.stage or "probe"
    if hi is None:
        where = f"fits up to {lo}, no failure yet" if lo else "nothing fits yet"
    else:
        where = f"between {lo} (fits) and {hi} (fails): {hi - lo - 1} size(s) unknown"
    return f"search: {kind} {probe.batch} {what} -> {where}"


def print_recommendation(row: MaxBatchResult, file: Any) -> None:
    """The recommended size, the margin it leaves and what that is made of, and how to train to keep it."""
    import json

    from harness.maxbatch.advice import cap_skips_settling, env_words, settle_stopped

    total = row.margin_total_mib
    if total is None:  # a row from before issue 18: the user's margin only
        total = row.margin_mib or 0.0
        parts = f"--margin-mib {row.margin_mib:g}" if row.margin_mib else ""
    else:
        parts = ", ".join(f"{what} {mib:.1f}" for what, mib in (
            ("run-to-run jitter", row.margin_jitter_mib or 0.0),
            ("growth over the confirm run", row.margin_growth_mib or 0.0),
            ("glibc heap allowance", row.margin_heap_mib or 0.0),
            ("--margin-mib", row.margin_mib or 0.0)) if mib)
    where = "under the budget" if row.capped else "at the boundary"  # no size failed below the cap: no boundary
    margin = f" leaving {total:.1f} MiB unused {where} ({parts})" if total else ""
    runs = json.loads(row.heap_settle_json) if row.heap_settle_json else []
    stopped = settle_stopped(row)
    if not row.recommended_batch and stopped:
        print(f"recommended{margin}: none: {stopped}", file=file)
    elif not row.recommended_batch:
        print(f"recommended{margin}: none: no batch size leaves that margin under this budget; give a larger "
              f"--memory-limit-mib (at least {total:.0f} MiB more)", file=file)
    else:
        print(f"recommended{margin}: {row.recommended_batch}  (power of two: "
              f"{_fmt_int(row.recommended_pow2 or None)}, multiple of 8: {_fmt_int(row.recommended_mult8)})",
              file=file)
    if row.train_env_json is not None:
        train_env = json.loads(row.train_env_json or "{}")
        if train_env:
            print(f"the probes ran with: {env_words(train_env)}; the answer holds only under the same settings, "
                  f"so train with them too (e.g. `{env_words(train_env)} python train.py`)", file=file)
        else:
            print("the probes ran with no allocator settings (none set by batchscope or in your environment: glibc's "
                  "and the framework's defaults, as a plain `python train.py` runs); setting one in training (e.g. "
                  "PYTORCH_CUDA_ALLOC_CONF, MALLOC_MMAP_THRESHOLD_) changes the answer", file=file)
    if row.confirm_steps:
        print(f"confirm run: {row.confirm_steps} steps + eval at {row.max_batch}", file=file)
    if runs:
        tried = sorted({r["batch"] for r in runs if r["batch"]}, reverse=True)
        failed = [f"{r['batch']} ({r['status']})" for r in runs if r["status"] != "ok" and r["batch"]]
        print(f"settled under glibc's default malloc: {len(runs)} fresh run(s) of {row.heap_settle_steps} "
              f"steps + eval at {', '.join(map(str, tried))}"
              + (f"; failed: {', '.join(failed)}" if failed else "; all trained"), file=file)
    elif cap_skips_settling(row):
        print(f"not settled: at --max-batch-cap {row.max_batch} the probes left more of the budget unused than the "
              f"cap's whole peak ({row.answer_peak_mib:.0f} MiB): glibc's heap, which moves by tens of MiB, cannot "
              "use that up", file=file)
    if row.verify_status:
        how = f": {row.verify_reason}" if row.verify_reason else ""
        print(f"verify: {row.recommended_batch} trained {row.verify_steps} steps + eval in a fresh worker "
              f"under the same budget and settings: {row.verify_status.upper()}{how}", file=file)


def print_forecast(desc: Any, req: Any, budget_mib: float, file: Any = None) -> None:
    """The seed's estimate from the description alone, printed before the first probe starts.

    Weights, gradients and optimizer state (fp32) plus every layer's output and its gradient per sample:
    a large model's expected answer in a second, while the probes that measure it take minutes.
    """
    from harness.maxbatch.advice import MIB, Formula

    file = file or sys.stdout
    per_sample_mib = desc.activation_floats_per_sample() * 4 * 2 / MIB
    f = Formula.compute(desc.param_count(), req.optimizer, req.momentum, budget_mib, per_sample_mib)
    raw = (budget_mib - f.model_state_mib) / per_sample_mib if per_sample_mib > 0 else 0.0
    print(f"forecast from the description alone (before any probe): {desc.param_count():,} parameters, "
          f"model state {f.model_state_mib:.1f} MiB (weights, gradients, {req.optimizer} state), activations "
          f"{per_sample_mib:.3f} MiB per sample", file=file)
    if f.batch:
        print(f"  -> about {int(raw):,} samples fit in {budget_mib:.0f} MiB (power of two: {f.batch}); the "
              "framework's own overhead is not in it: the measured answer follows", file=file, flush=True)
    else:
        print(f"  -> the model state alone does not fit {budget_mib:.0f} MiB; the probes will tell",
              file=file, flush=True)


def print_result(row: MaxBatchResult, file: Any = None) -> None:
    """The answer, in the words of the issue: fits / fails / recommended / probes / formula."""
    from harness.maxbatch.advice import answer_headroom_mib, jitter_advice

    file = file or sys.stdout
    fail = row.first_fail_batch
    print("", file=file)
    print(f"largest batch that fits (train + eval step): {row.max_batch}"
          + ("  (every size up to --max-batch-cap fits)" if row.capped else ""), file=file)
    if row.resolution_note:  # the cap moved onto the grid, or a search stopped at the process-to-process spread
        print(f"  {row.resolution_note}", file=file)
    if fail is not None and fail - row.max_batch > 1:  # stopped within the resolution (issue 31)
        print(f"smallest size tried that fails: {fail}: {row.first_fail_status}: {row.first_fail_reason}",
              file=file)
        gap = f"{row.max_batch + 1}" + (f"-{fail - 1}" if fail - 1 > row.max_batch + 1 else "")
        if "spread" not in (row.resolution_note or ""):  # else the note says why: a finer resolution cannot help
            print(f"  {gap} not tried: the search stops within its resolution "
                  f"({row.resolution or '?'}; --granularity exact to try them)", file=file)
    elif fail is not None:
        print(f"first size that fails: {fail}: {row.first_fail_status}: {row.first_fail_reason}",
              file=file)
    print_recommendation(row, file)
    spare = answer_headroom_mib(row)
    if spare is not None:
        print(f"memory left unused at {row.max_batch}: {spare:.1f} MiB of {row.budget_mib:.0f} MiB "
              f"({row.budget_kind})", file=file)
    advice = jitter_advice(row)
    if advice is not None:
        print(f"note: {advice}", file=file)
    res = f", resolution {row.resolution}" if row.resolution else ""
    print(f"probes: {row.probes_n} fresh workers, {row.wall_s:.1f} s ({row.strategy}{res})", file=file)
    if row.fit_b_mib_per_sample is not None:
        if row.fit_source == "estimate":  # no two probes near the boundary far enough apart for a measured slope
            print(f"memory line: {row.fit_a_mib:.0f} MiB + {row.fit_b_mib_per_sample:.3f} MiB per sample (the "
                  "framework's estimated slope through the largest size that fitted)", file=file)
        else:
            print(f"measured memory: {row.fit_a_mib:.0f} MiB + {row.fit_b_mib_per_sample:.3f} MiB "
                  "per sample", file=file)
    err = row.formula_error_pct
    print(f"seed's formula, (budget {row.budget_mib:.0f} - model state "
          f"{row.model_state_mib:.1f} MiB) / "
          f"{row.per_sample_activation_mib:.3f} MiB per sample, power of two: {row.formula_batch}"
          + (f"  ({err:+.0f}% vs measured)" if err is not None else ""), file=file)
    aerr = row.formula_analytic_error_pct
    if row.analytic_activation_mib_per_sample is not None:  # a native model has no description to size
        print(f"  with the analytic activation size "
              f"({row.analytic_activation_mib_per_sample:.3f} MiB per sample): "
              f"{row.formula_analytic_batch}" + (f"  ({aerr:+.0f}% vs measured)" if aerr is not None else ""),
              file=file)
    print_predicted(row, file)


def print_predicted(row: MaxBatchResult, file: Any = None) -> None:
    """Issue 41: the boundary predicted from the framework's own estimate, the seed's formula and the measured answer,
    side by side, each prediction's error in % of the measured one."""
    file = file or sys.stdout

    def err(pct: float | None) -> str:
        return f"  ({pct:+.1f}% vs measured)" if pct is not None else ""

    print("predicted / formula / measured:", file=file)
    if row.estimate_batch is not None and row.estimate_mib_per_sample is not None:
        fixed = row.estimate_fixed_cost_mib
        print(f"  predicted from the framework's estimate ({row.estimate_mib_per_sample:.3f} MiB per sample"
              + (f", fixed cost {fixed:.0f} MiB beyond it measured by the first probe" if fixed is not None else "")
              + f"): {row.estimate_batch}{err(row.estimate_error_pct)}", file=file)
    else:
        print(f"  predicted: none ({row.estimate_note or 'not stored'})", file=file)
    print(f"  seed's formula: {row.formula_batch}{err(row.formula_error_pct)}", file=file)
    print(f"  measured: {row.max_batch}" + (f" (resolution {row.resolution})" if row.resolution else ""), file=file)
    if row.estimate_batch is not None and row.estimate_note:
        print(f"  estimate: {row.estimate_note}", file=file)
