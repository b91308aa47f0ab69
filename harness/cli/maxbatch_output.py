"""What ``batchscope maxbatch`` prints about a search: the bracket as it narrows, the forecast before the first
probe, the answer and the recommendation (:mod:`harness.cli.maxbatch` runs it; its names are importable there)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.maxbatch.listener import MaxBatchListener
from harness.records import MaxBatchResult

if TYPE_CHECKING:
    from harness.config.trial import TrialSpec
    from harness.maxbatch.listener import Bracket
    from harness.maxbatch.searching import MaxBatchPlan
    from harness.maxbatch.whathelps import Searched
    from harness.records import TrialOutcome
    from harness.run.protocol import Message


def _fmt_int(value: int | None) -> str:
    return "-" if value is None else str(value)


def mib_text(mib: float | None) -> str:
    """MiB to one decimal, or to three significant digits below 0.05 MiB, where one decimal would print a size that
    exists (a tiny model's weights and optimizer state, 0.01 MiB) as 0.0; "?" for a figure a row does not have."""
    if mib is None:
        return "?"
    return f"{mib:.3g}" if 0 < abs(mib) < 0.05 else f"{mib:.1f}"


def bracket_line(probe: Any, lo: int, hi: int | None) -> str:
    """One probe's line as the search narrows: what it found and the bracket it left (``lo`` fits, ``hi`` fails)."""
    what = "fits" if probe.status == "ok" else "out of memory" if probe.status == "oom" else probe.status
    kind = probe.stage or ("confirm" if probe.confirm else "probe")
    if probe.confirm and kind != "confirm":  # a search probe that trained the confirm run's length (issue 41)
        kind += " (confirm length)"
    if hi is None:
        where = f"fits up to {lo}, no failure yet" if lo else "nothing fits yet"
    else:
        where = f"between {lo} (fits) and {hi} (fails): {hi - lo - 1} size(s) unknown"
    return f"search: {kind} {probe.batch} {what} -> {where}"


def print_recommendation(row: MaxBatchResult, file: Any, verify_asked: bool = False) -> None:
    """The recommended size, the margin it leaves and what that is made of, and how to train to keep it; the
    ``--verify`` run's result, or, where one was asked for and there was nothing to train, that it did not run."""
    from harness.maxbatch.advice import cap_skips_settling, env_words, settle_stopped

    rec, margin = row.recommendation, row.margin
    total = margin.total_mib
    if total is None:  # a row from before issue 18: the user's margin only
        total = margin.user_mib or 0.0
        parts = f"--margin-mib {margin.user_mib:g}" if margin.user_mib else ""
    else:
        parts = ", ".join(f"{what} {mib:.1f}" for what, mib in (
            ("run-to-run jitter", margin.jitter_mib or 0.0),
            ("growth over the confirm run", margin.growth_mib or 0.0),
            ("glibc heap allowance", margin.heap_mib or 0.0),
            ("--margin-mib", margin.user_mib or 0.0)) if round(mib, 1))  # a part that shows as 0.0 is left out
    where = "under the budget" if row.answer.capped else "at the boundary"  # no size failed below the cap: no boundary
    unused = f" leaving {total:.1f} MiB unused {where} ({parts})" if total else ""
    runs = row.settling.runs
    stopped = settle_stopped(row)
    if not rec.batch and stopped:
        print(f"recommended{unused}: none: {stopped}", file=file)
    elif not rec.batch:
        print(f"recommended{unused}: none: no batch size leaves that margin under this budget; give a larger "
              f"--memory-limit-mib (at least {total:.0f} MiB more)", file=file)
    else:
        print(f"recommended{unused}: {rec.batch}  (power of two: "
              f"{_fmt_int(rec.pow2 or None)}, multiple of 8: {_fmt_int(rec.mult8)})",
              file=file)
    if rec.train_env is not None:
        if rec.train_env:
            print(f"the probes ran with: {env_words(rec.train_env)}; the answer holds only under the same settings, "
                  f"so train with them too (e.g. `{env_words(rec.train_env)} python train.py`)", file=file)
        else:
            print("the probes ran with no allocator settings (none set by batchscope or in your environment: glibc's "
                  "and the framework's defaults, as a plain `python train.py` runs); setting one in training (e.g. "
                  "PYTORCH_CUDA_ALLOC_CONF, MALLOC_MMAP_THRESHOLD_) changes the answer", file=file)
    if row.probes.confirm_steps:
        at = [p for p in row.probes.items or () if p.batch == row.answer.max_batch and p.status == "ok"]
        own = at and not any(p.stage == "confirm" for p in at) and any(p.confirm for p in at)
        print(f"confirm run: {row.probes.confirm_steps} steps + eval at {row.answer.max_batch}"
              + (" (the answer's own probe trained that long; the probes' peaks showed no spread between processes, "
                 "so no second process)" if own else ""), file=file)
    if runs:
        tried = sorted({r.batch for r in runs if r.batch}, reverse=True)
        failed = [f"{r.batch} ({r.status})" for r in runs if r.status != "ok" and r.batch]
        print(f"settled under glibc's default malloc: {len(runs)} fresh run(s) of {row.settling.steps} "
              f"steps + eval at {', '.join(map(str, tried))}"
              + (f"; failed: {', '.join(failed)}" if failed else "; all trained"), file=file)
    elif cap_skips_settling(row):
        print(f"not settled: at --max-batch-cap {row.answer.max_batch} the probes left more of the budget unused than "
              f"the cap's whole peak ({row.answer.peak_mib:.0f} MiB): glibc's heap, which moves by tens of MiB, cannot "
              "use that up", file=file)
    verified = row.verification
    if verified.status:
        how = f": {verified.reason}" if verified.reason else ""
        print(f"verify: {rec.batch} trained {verified.steps} steps + eval in a fresh worker "
              f"under the same budget and settings: {verified.status.upper()}{how}", file=file)
    elif verify_asked:
        print("verify: not run: there is no recommended size to train", file=file)


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
          f"model state {mib_text(f.model_state_mib)} MiB (weights, gradients, {req.optimizer} state), activations "
          f"{per_sample_mib:.3f} MiB per sample", file=file)
    if f.batch:
        print(f"  -> about {int(raw):,} samples fit in {budget_mib:.0f} MiB (power of two: {f.batch}); the "
              "framework's own overhead is not in it: the measured answer follows", file=file, flush=True)
    else:
        print(f"  -> the model state alone does not fit {budget_mib:.0f} MiB; the probes will tell",
              file=file, flush=True)


def print_result(row: MaxBatchResult, file: Any = None, verify_asked: bool = False) -> None:
    """The answer, in the words of the issue: fits / fails / recommended / probes / formula (``verify_asked``: the
    user gave ``--verify``)."""
    from harness.maxbatch.advice import answer_headroom_mib, jitter_advice

    file = file or sys.stdout
    answer, formula, line = row.answer, row.formula, row.line
    fail = answer.fail_batch
    print("", file=file)
    print(f"largest batch that fits (train + eval step): {answer.max_batch}"
          + ("  (every size up to --max-batch-cap fits)" if answer.capped else ""), file=file)
    if answer.resolution_note:  # the cap moved onto the grid, or a search stopped at the process-to-process spread
        print(f"  {answer.resolution_note}", file=file)
    if fail is not None and fail - answer.max_batch > 1:  # stopped within the resolution (issue 31)
        print(f"smallest size tried that fails: {fail}: {answer.fail_status}: {answer.fail_reason}",
              file=file)
        gap = f"{answer.max_batch + 1}" + (f"-{fail - 1}" if fail - 1 > answer.max_batch + 1 else "")
        if "spread" not in (answer.resolution_note or ""):  # else the note says why: a finer resolution cannot help
            print(f"  {gap} not tried: the search stops within its resolution "
                  f"({answer.resolution or '?'}; --granularity exact to try them)", file=file)
    elif fail is not None:
        print(f"first size that fails: {fail}: {answer.fail_status}: {answer.fail_reason}",
              file=file)
    print_recommendation(row, file, verify_asked)
    spare = answer_headroom_mib(row)
    if spare is not None:
        print(f"memory left unused at {answer.max_batch}: {spare:.1f} MiB of {row.budget_mib:.0f} MiB "
              f"({row.budget_kind})", file=file)
    advice = jitter_advice(row)
    if advice is not None:
        print(f"note: {advice}", file=file)
    res = f", resolution {answer.resolution}" if answer.resolution else ""
    print(f"probes: {row.probes.n} fresh workers, {row.probes.wall_s:.1f} s ({row.strategy}{res})", file=file)
    if line.b_mib_per_sample is not None:
        if line.source == "estimate":  # no two probes near the boundary far enough apart for a measured slope
            print(f"memory line: {line.a_mib:.0f} MiB + {line.b_mib_per_sample:.3f} MiB per sample (the "
                  "framework's estimated slope through the largest size that fitted)", file=file)
        else:
            print(f"measured memory: {line.a_mib:.0f} MiB + {line.b_mib_per_sample:.3f} MiB "
                  "per sample", file=file)
    err = formula.error_pct
    print(f"seed's formula, (budget {row.budget_mib:.0f} - model state "
          f"{mib_text(formula.model_state_mib)} MiB) / "
          f"{formula.per_sample_mib:.3f} MiB per sample, power of two: {formula.batch}"
          + (f"  ({err:+.0f}% vs measured)" if err is not None else ""), file=file)
    aerr = formula.analytic_error_pct
    if formula.analytic_mib_per_sample is not None:  # a native model has no description to size
        print(f"  with the analytic activation size "
              f"({formula.analytic_mib_per_sample:.3f} MiB per sample): "
              f"{formula.analytic_batch}" + (f"  ({aerr:+.0f}% vs measured)" if aerr is not None else ""),
              file=file)
    print_predicted(row, file)


def print_predicted(row: MaxBatchResult, file: Any = None) -> None:
    """Issue 41: the boundary predicted from the framework's own estimate, the seed's formula and the measured answer,
    side by side, each prediction's error in % of the measured one."""
    file = file or sys.stdout
    est = row.estimate

    def err(pct: float | None) -> str:
        return f"  ({pct:+.1f}% vs measured)" if pct is not None else ""

    print("predicted / formula / measured:", file=file)
    if est.batch is not None and est.mib_per_sample is not None:
        fixed = est.fixed_cost_mib
        print(f"  predicted from the framework's estimate ({est.mib_per_sample:.3f} MiB per sample"
              + (f", fixed cost {fixed:.0f} MiB beyond it measured by the first probe" if fixed is not None else "")
              + f"): {est.batch}{err(est.error_pct)}", file=file)
    else:
        print(f"  predicted: none ({est.note or 'not stored'})", file=file)
    print(f"  seed's formula: {row.formula.batch}{err(row.formula.error_pct)}", file=file)
    print(f"  measured: {row.answer.max_batch}" + (f" (resolution {row.answer.resolution})" if row.answer.resolution
                                                   else ""), file=file)
    if est.batch is not None and est.note:
        print(f"  estimate: {est.note}", file=file)


def print_plan(plan: MaxBatchPlan, file: Any = None) -> None:
    """What will run, before the first probe: the search (framework, model, device, budget, strategy, resolution), a
    cap moved onto the resolution's grid, the searches of a "what helps" run, and the forecast from the description."""
    file = file or sys.stdout
    first = plan.first
    req, budget = first.request, first.budget
    print(f"maxbatch: {req.framework} {req.model} on {budget.device}, budget {budget.mib:.0f} MiB ({budget.kind}), "
          f"strategy {req.strategy}, resolution {req.resolution(budget.device).label}; every probe is a fresh worker",
          file=file, flush=True)
    cap_note = req.search_cap(budget.device)[1]
    if cap_note:
        print(f"maxbatch: {cap_note}", file=file, flush=True)
    if plan.compare:
        print(f"what helps: {len(plan.searches)} searches, each a normal one with its own stored row: "
              + "; ".join(plan.labels), file=file, flush=True)
    if first.description is not None:
        print_forecast(first.description, req, budget.mib, file)
    else:
        print("native model (the framework's own): no forecast, since there is no description to size; the "
              "parameter count is the framework's, and no comparison across frameworks is made", file=file, flush=True)


def print_answer(done: list[Searched], compare: bool, out: Path, verify_asked: bool, wall_s: float) -> int:
    """The answer and the command's exit code: one search's answer in full; with settings compared, the plain
    search's (or the first's) in full, then one table of every search. Exit 0 when every search finished and something
    fits; 3 when nothing fits even at a micro-batch of 1; 1 when a search aborted or a --verify run failed."""
    from harness.maxbatch.whathelps import PLAIN, TABLE_NOTE, cost_notes, render_table, table_rows

    first = done[0]
    if not compare and first.row is not None:
        print_result(first.row, verify_asked=verify_asked)
        print(f"wall time: {wall_s:.1f} s for {first.row.probes.n} probes (starting workers, storing, and any "
              "settling or --verify runs included)")
        print(f"\nstored in {out / 'results.sqlite'} (table maxbatch, probes in trials with purpose 'probe')")
    else:
        if first.row is not None and first.row.answer.max_batch:
            print(f"\n{'plain search' if first.setting == PLAIN else first.setting}:", end="")
            print_result(first.row, verify_asked=verify_asked)
        for s in done:
            if s.problem:
                print(f"{s.setting}: {s.problem}", file=sys.stderr)
        print("\nwhat helps (one search per row; the change is against the plain search):")
        print("\n".join(render_table(table_rows(done))))
        print(f"note: {TABLE_NOTE}")
        for cost in cost_notes(done):
            print(f"cost: {cost}")
        print(f"\nstored in {out / 'results.sqlite'} (table maxbatch, one row per search, told apart by its setting; "
              "probes in trials with purpose 'probe')")
        print(f"wall time: {wall_s:.1f} s for {len(done)} searches")
    if any(s.row is None or s.row.verify_failed for s in done):
        return 1
    return 0 if any(s.row is not None and s.row.answer.max_batch for s in done) else 3


class ProbePrinter(MaxBatchListener):
    """The search's listener: each probe live, as a sweep's trials are (its progress, its end), the bracket as it
    narrows, and in a "what helps" run which search is running."""

    def __init__(self, plan: MaxBatchPlan, quiet: bool = False) -> None:
        from harness.cli.progress import make_progress

        self.display = make_progress(quiet=quiet)  # live where stdout is a terminal, else plain lines
        self.confirm_steps, self.budget_kind = plan.first.request.confirm_steps, plan.first.budget.kind
        self.probes: list[str] = []  # trial hashes in the order the probes started

    def __enter__(self) -> ProbePrinter:
        self.display.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.display.__exit__(*exc)

    def on_search_start(self, i: int, n: int, label: str) -> None:
        self.display.line(f"search {i + 1}/{n}: {label}")

    def on_probe_message(self, trial: TrialSpec, msg: Message) -> None:
        if not self.probes or self.probes[-1] != trial.trial_hash:  # a control run repeats a probe's hash: new
            self.probes.append(trial.trial_hash)
            self.display.start(len(self.probes), 0, trial)
        self.display.event(trial, msg)

    def on_probe_complete(self, outcome: TrialOutcome) -> None:
        from harness.cli.table import shorten
        from harness.maxbatch.probes import probe_peak_mib

        o = outcome
        peak = probe_peak_mib(o, self.budget_kind) if o.status == "ok" else None
        extra = (f"peak {peak:.0f} MiB" if peak is not None else "") if o.status == "ok" else shorten(o.reason, 110)
        kind = (o.trial.purpose if o.trial.purpose in ("verify", "settle")
                else "confirm" if o.trial.timed_steps == self.confirm_steps else "probe")
        self.display.done(len(self.probes), 0, o, text=f"{kind:<7} {o.status:<8} {o.elapsed_s:5.1f} s  {extra}")

    def on_bracket(self, bracket: Bracket) -> None:
        self.display.line(bracket_line(bracket.probe, bracket.lo, bracket.hi))
