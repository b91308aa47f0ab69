"""``batchscope maxbatch``: the largest batch that fits, found by probing in fresh workers.

Exit codes: 0 found (and, with --verify, the recommended size trained), 2 bad options, 3 the model does not
fit at batch size 1, 1 a probe kept failing for a reason other than memory or the --verify run failed, 130
interrupted. With settings to try ("what helps": --accumulate-steps K > 1, --precision other than fp32,
--adapter-option), several searches run: 0 when each finished and at least one fits, 3 when none fits even at a
micro-batch of 1, 1 when a search aborted (the others still run and are shown) or a --verify run failed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.maxbatch_output import (  # its output's home; these names are read from here too
    bracket_line as bracket_line,
)
from harness.cli.maxbatch_output import (
    print_forecast as print_forecast,
)
from harness.cli.maxbatch_output import (
    print_recommendation as print_recommendation,
)
from harness.cli.maxbatch_output import (
    print_result as print_result,
)
from harness.cli.progress import make_progress
from harness.cli.table import path_arg
from harness.config.limits import DEFAULT_SETTLE_STEPS
from harness.errors import ConfigError
from harness.maxbatch.listener import MaxBatchListener

if TYPE_CHECKING:  # the search's modules are imported when a command runs
    from harness.config.trial import TrialSpec
    from harness.envs.runtime import FrameworkRuntime
    from harness.maxbatch.listener import Bracket
    from harness.maxbatch.request import MaxBatchRequest
    from harness.maxbatch.searching import MaxBatchSearch
    from harness.maxbatch.whathelps import Searched
    from harness.records import TrialOutcome
    from harness.run.protocol import Message


def shape_arg(text: str) -> tuple[int, int, int]:
    """``C,H,W`` (or ``CxHxW``) as an argparse type: three whole numbers > 0, refused in words otherwise."""
    try:
        parts = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W (e.g. 3,32,32)") from None
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W with three whole numbers > 0")
    return parts  # type: ignore[return-value]


def register(sub: Any) -> None:
    """Add the ``maxbatch`` subcommand. Long (about 75 lines) because it is one parser's option list, one
    declaration per option, read top to bottom as ``--help`` prints it; there is no logic to cut out."""
    from harness.config.choices import DATA_LAYOUTS, DEVICES, MATH_MODES, OPTIMIZERS, PRECISIONS
    from harness.maxbatch.search import STRATEGIES

    p = sub.add_parser("maxbatch", help="find the largest batch that fits (train + eval step), probing in "
                       "fresh workers under a real memory budget",
                       description="Find the largest batch size whose full train step (forward, backward, "
                       "update) and eval step fit the memory budget. Every probe is a fresh worker process. "
                       "On CPU the budget (--memory-limit-mib) is enforced by the OS on each probe. What "
                       "helps: with --accumulate-steps K > 1, a --precision other than fp32 or --adapter-option, "
                       "the plain search, each setting alone and all together (when more than one) are run, each a "
                       "normal search with its own stored row, and one table compares them.")
    p.add_argument("--framework", required=True, help="adapter name, e.g. pytorch (`batchscope adapters`)")
    p.add_argument("--model", required=True, help="model from the catalogue (e.g. deep_cnn, resnet20) or your own "
                   "\"package.module:function\" (docs/models.md)")
    p.add_argument("--dataset", default="synthetic", help="data set (default synthetic)")
    p.add_argument("--synthetic-shape", type=shape_arg, default=(3, 32, 32), help="C,H,W of synthetic input")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="other than fp32: also search without it, and compare (\"what helps\", below)")
    p.add_argument("--math-mode", choices=MATH_MODES, default="ieee",
                   help="float32 convolutions and matmuls on a GPU: ieee (true float32, the default), tf32 "
                        "(TensorFloat-32 tensor cores, Ampere and newer) or framework-default (docs/precision.md)")
    p.add_argument("--accumulate-steps", type=int, default=1, metavar="K",
                   help="K micro-batches per optimizer update: the answer is the largest micro-batch, the "
                        "effective batch K times it; K > 1 also searches without it, and compares")
    p.add_argument("--adapter-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an adapter setting, as under [adapters.<name>] (e.g. memory_mode=preallocate for "
                        "tensorflow on a GPU); repeatable; also searches without it, and compares")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", dest="env_setting",
                   help="an allocator environment variable for the probes (e.g. MALLOC_MMAP_THRESHOLD_=131072: a "
                        "fixed glibc mmap threshold, measured to cost PyTorch 0.57x of its CPU throughput); "
                        "repeatable; also searches without it, and compares")
    p.add_argument("--no-plain", action="store_true",
                   help="with settings to try: skip the plain search (fp32, K = 1, default adapter settings, no "
                        "--env)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--strategy", choices=STRATEGIES, default="model",
                   help="model (default): the first size near the boundary predicted from the framework's own "
                        "step-memory estimate (PyTorch, JAX) and the fixed cost the first probe measures, else from "
                        "a line fitted to small probes; fitted: always the fitted line (the search before issue 41); "
                        "double-bisect: 1, 2, 4, ... then bisect, as Lightning's binsearch")
    p.add_argument("--granularity", default="", metavar="RES",
                   help="when the search stops: within 1%% of the answer by default (on a GPU also on multiples of "
                        "8, which tensor cores prefer: 8,1%%); 'exact' for adjacent sizes, N%% for another tolerance, "
                        "K for multiples of K, or K,N%%")
    p.add_argument("--memory-limit-mib", type=float, default=0.0,
                   help="the budget: on a GPU an emulated smaller card (default: the whole card); on CPU "
                        "required, enforced on each probe by the OS (RLIMIT_DATA)")
    p.add_argument("--margin-mib", type=float, default=0.0,
                   help="memory to leave unused in the recommended batch size (default 0)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (its state counts; default 0.9)")
    p.add_argument("--threads", type=int, default=0, help="framework threads per probe (0: its default)")
    p.add_argument("--timeout-s", type=float, default=300.0,
                   help="per probe (default 300); with --accumulate-steps K, K times that")
    p.add_argument("--max-batch-cap", type=int, default=1 << 16, help="stop searching above this size")
    p.add_argument("--verify", action="store_true",
                   help="after the search, train the recommended size in a fresh worker under the same budget "
                        "and allocator settings for --verify-steps steps, and say whether it passed")
    p.add_argument("--verify-steps", type=int, default=None,
                   help="timed steps of the --verify run (default: the confirm run's length)")
    p.add_argument("--settle-steps", type=int, default=DEFAULT_SETTLE_STEPS, metavar="N",
                   help="on CPU under glibc's default malloc, the recommendation must train 3 fresh runs of N steps "
                        f"+ eval (default {DEFAULT_SETTLE_STEPS}); the heap grows over steps, so give the length of "
                        "the training the answer must hold for. No settling (and so no effect) on a GPU or with a "
                        "fixed mmap threshold (--env MALLOC_MMAP_THRESHOLD_)")
    p.add_argument("--out", type=path_arg("--out"), help="output directory for the store (default results/maxbatch)")
    p.add_argument("--data-dir", type=path_arg("--data-dir"), help="local copy of a downloadable data set")
    p.add_argument("--data-layout", choices=DATA_LAYOUTS, default="auto",
                   help="image layout of an npz:FILE data set (default: detected from the channel axis)")
    p.add_argument("--python", action="append", default=[], metavar="FRAMEWORK=PATH",
                   help="run the probes in this interpreter (your own environment, checked first) instead of "
                        "batchscope's managed one for the framework")
    p.add_argument("--quiet", action="store_true",
                   help="plain lines instead of live progress (the default when stdout is not a terminal)")
    p.set_defaults(func=cmd_maxbatch)


def cmd_maxbatch(args: argparse.Namespace) -> int:
    """Run the search and print the answer beside the formula: in the order the user sees it (validate, forecast,
    search, answer, advice, verify); nothing is written before every check has passed."""
    from harness.monitor import environment
    from harness.store.db import make_out_dir

    req = _request(args)
    out = Path(args.out or Path("results") / "maxbatch")
    env = environment.capture()
    runtime = _runtime(args, req, env)
    plan = _plan(args, req, env, out, runtime)
    listener = _Printer(make_progress(quiet=args.quiet), req, plan.searches[0].budget.kind)
    command = "batchscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # the adapter, the data and the model's fit to it were checked above, before the store is created
    make_out_dir(out)
    started = time.monotonic()
    try:
        done, outcome = _run_searches(args, plan, listener, out, command)
    except KeyboardInterrupt:
        # Here, not in the CLI's generic handler: that one suggests --resume, which maxbatch does not have (a
        # search's probes depend on each other, so there is nothing to resume from; issue 13, item 14).
        print(f"\nbatchscope: interrupted. The probes that finished are stored in {out / 'results.sqlite'} "
              "(trials with purpose 'probe'); maxbatch has no --resume: run the same command again to search "
              "from the start.", file=sys.stderr)
        return 130
    if plan.compare:
        code = _print_what_helps(done, out, args.verify)
        print(f"wall time: {time.monotonic() - started:.1f} s for {len(done)} searches")
        return code
    print_result(outcome.row, verify_asked=args.verify)
    print(f"wall time: {time.monotonic() - started:.1f} s for {outcome.row.probes.n} probes (starting workers, "
          "storing, and any settling or --verify runs included)")
    print(f"\nstored in {out / 'results.sqlite'} (table maxbatch, probes in trials with purpose 'probe')")
    return 1 if outcome.row.verify_failed else 0


def _runtime(args: argparse.Namespace, req: MaxBatchRequest, env: dict[str, Any]) -> FrameworkRuntime:
    """The framework resolved once (harness.envs.runtime): its adapter, and its interpreter, ``--python
    FRAMEWORK=PATH`` (checked there, exit 2 where it cannot run it; exit 2 too for a framework this search does not
    run) or its managed environment, built on first use (``cuda`` where NVML sees no GPU: exit 2, nothing
    downloaded); one line says which. A failed build is exit 1."""
    from harness.envs.guard import managed_kind
    from harness.envs.resolve import parse_python_options
    from harness.envs.runtime import FLAG, resolve_runtimes
    from harness.errors import BatchscopeError

    named = {fw: (path, f"{FLAG} {fw}") for fw, path in parse_python_options(args.python).items()}
    kind = managed_kind([fw for fw in [req.framework] if fw not in named], bool(env.get("gpus")))
    runtime = resolve_runtimes([req.framework], named, kind,
                               say=lambda line: print(f"environment {line}", flush=True))[req.framework]
    if runtime.interpreter.problem:
        raise BatchscopeError(f"{req.framework}'s environment could not be built: {runtime.interpreter.problem}")
    print(f"environment {runtime.line()}", flush=True)
    return runtime


def _request(args: argparse.Namespace) -> MaxBatchRequest:
    """The search the command line asks for, every argument checked (ConfigError: exit 2, nothing written)."""
    from harness.maxbatch import whathelps
    from harness.maxbatch.request import CONFIRM_STEPS, MaxBatchRequest
    from harness.models import check_model_name
    from harness.registry import adapter_class, known_adapter_names

    if args.framework not in known_adapter_names():
        raise ConfigError(f"--framework {args.framework!r} is not a registered adapter; known: "
                          f"{', '.join(sorted(known_adapter_names()))}")
    options = whathelps.adapter_options(args.adapter_option, adapter_class(args.framework))
    env_setting = whathelps.parse_env_settings(args.env_setting)
    check_model_name(args.model)  # a user's "module:function" is imported here, framework imports refused
    if args.verify_steps is not None and not args.verify:
        raise ConfigError("--verify-steps applies only with --verify; add --verify or leave it out")
    verify_steps = (CONFIRM_STEPS if args.verify_steps is None else args.verify_steps) if args.verify else 0
    if args.verify and verify_steps < 1:
        raise ConfigError(f"--verify-steps {verify_steps!r} must be >= 1")
    return MaxBatchRequest(framework=args.framework, model=args.model, dataset=args.dataset,
                           precision=args.precision, math_mode=args.math_mode, device=args.device,
                           strategy=args.strategy,
                           memory_limit_mib=args.memory_limit_mib, margin_mib=args.margin_mib,
                           timeout_s=args.timeout_s, optimizer=args.optimizer, momentum=args.momentum,
                           threads=args.threads, max_batch_cap=args.max_batch_cap,
                           synthetic_shape=args.synthetic_shape, verify_steps=verify_steps,
                           settle_steps=args.settle_steps,
                           accumulate_steps=args.accumulate_steps, adapter_options=options, env=env_setting,
                           granularity=args.granularity)


@dataclass(frozen=True)
class _Plan:
    """What the command will run, known before anything is written: one search per setting (the budget, the data and
    the model's description resolved once, shared by all), compared when there are several ("what helps")."""

    searches: list[MaxBatchSearch]
    compare: bool


def _plan(args: argparse.Namespace, req: MaxBatchRequest, env: dict[str, Any], out: Path,
          runtime: FrameworkRuntime) -> _Plan:
    """Resolve the budget and refuse what cannot apply under it, build the search on it (the data, the model's
    description: once, for every setting), and print what will run (the forecast)."""
    from harness.gpu_peaks import refuse_tf32_without_units
    from harness.maxbatch import whathelps
    from harness.maxbatch.request import resolve_budget
    from harness.maxbatch.searching import DataSource, MaxBatchSearch
    budget = resolve_budget(req, list(env.get("gpus") or []), runtime)  # refuse bad options before writing anything
    refuse_tf32_without_units([req.math_mode], list(env.get("gpus") or []), "--math-mode")
    compare = whathelps.asks_what_helps(req.precision, req.accumulate_steps, req.adapter_options, req.env)
    adapter = runtime.adapter_class
    reqs = (whathelps.setting_requests(req, adapter, budget.device, budget.trial_limit_mib,
                                       include_plain=not args.no_plain) if compare else [req])
    if args.no_plain and not compare:
        raise ConfigError("--no-plain applies only with a setting to try (--accumulate-steps K > 1, --precision "
                          "other than fp32, --adapter-option, --env); add one or leave --no-plain out")
    # data and model before the store: a bad file or a model that does not fit the input leaves nothing written
    built = MaxBatchSearch.build(req, env, runtime=runtime, budget=budget,
                                 data=DataSource(args.data_dir, args.data_layout), log_dir=out / "logs")
    print(f"maxbatch: {req.framework} {req.model} on {budget.device}, budget {budget.mib:.0f} MiB "
          f"({budget.kind}), strategy {req.strategy}, resolution {req.resolution(budget.device).label}; every probe "
          "is a fresh worker", flush=True)
    cap_note = req.search_cap(budget.device)[1]
    if cap_note:
        print(f"maxbatch: {cap_note}", flush=True)
    if compare:
        print(f"what helps: {len(reqs)} searches, each a normal one with its own stored row: "
              + "; ".join(whathelps.request_label(r) for r in reqs), flush=True)
    if built.description is not None:
        print_forecast(built.description, req, budget.mib)
    else:
        print("native model (the framework's own): no forecast, since there is no description to size; the "
              "parameter count is the framework's, and no comparison across frameworks is made", flush=True)
    return _Plan(searches=[built.with_request(r) for r in reqs], compare=compare)


class _Printer(MaxBatchListener):
    """The search's listener: each probe live, as a sweep's trials are (its progress, its end), the bracket as it
    narrows, and in a "what helps" run which search is running."""

    def __init__(self, display: Any, req: MaxBatchRequest, budget_kind: str) -> None:
        self.display, self.req, self.budget_kind = display, req, budget_kind
        self.probes: list[str] = []  # trial hashes in the order the probes started

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
                else "confirm" if o.trial.timed_steps == self.req.confirm_steps else "probe")
        self.display.done(len(self.probes), 0, o, text=f"{kind:<7} {o.status:<8} {o.elapsed_s:5.1f} s  {extra}")

    def on_bracket(self, bracket: Bracket) -> None:
        self.display.line(bracket_line(bracket.probe, bracket.lo, bracket.hi))


def _run_searches(args: argparse.Namespace, plan: _Plan, shown: _Printer, out: Path,
                  command: str) -> tuple[list[Searched], Any]:
    """Every search of the plan, under the output directory's lock and one open store: (the compared searches,
    the plain search's outcome). A plain search's errors are the command's (exit 3: does not fit, 1: aborted)."""
    from harness.maxbatch.searching import search_each
    from harness.store import Store
    from harness.store.lock import locked_out_dir

    first = plan.searches[0]
    with shown.display, locked_out_dir(out), Store.open(out) as store:
        run_id = store.begin_run(first.request.experiment, {"maxbatch": vars(args) | {"func": None}}, command,
                                 dict(first.env))
        if plan.compare:
            return search_each(plan.searches, store, run_id, shown), None
        return [], first.run(store, run_id, shown)


def _print_what_helps(done: list[Searched], out: Path, verify_asked: bool = False) -> int:
    """The plain search's answer in full, then one table of every search. Exit 0 when every search finished and
    something fits; 3 when nothing fits even at a micro-batch of 1; 1 when a search aborted or a --verify failed."""
    from harness.maxbatch.whathelps import PLAIN, TABLE_NOTE, cost_notes, render_table, table_rows

    first = done[0]  # the plain search (or, with --no-plain, the first setting): its answer in full
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
    if any(s.row is None or s.row.verify_failed for s in done):
        return 1
    return 0 if any(s.row is not None and s.row.answer.max_batch for s in done) else 3
