"""``batchscope maxbatch``: the largest batch that fits, found by probing in fresh workers.

Exit codes: 0 found, 2 bad options, 3 the
model does not fit at batch size 1, 1 a probe kept failing for a reason other than memory.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from harness.errors import ConfigError


def _shape(text: str) -> tuple[int, int, int]:
    try:
        parts = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W (e.g. 3,32,32)") from None
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W with three whole numbers > 0")
    return parts  # type: ignore[return-value]


def register(sub: Any) -> None:
    """Add the ``maxbatch`` subcommand."""
    from harness.config.experiment import DATA_LAYOUTS, DEVICES, OPTIMIZERS, PRECISIONS
    from harness.maxbatch.search import STRATEGIES

    p = sub.add_parser("maxbatch", help="find the largest batch that fits (train + eval step), probing in "
                       "fresh workers under a real memory budget",
                       description="Find the largest batch size whose full train step (forward, backward, "
                       "update) and eval step fit the memory budget. Every probe is a fresh worker process. "
                       "On CPU the budget (--memory-limit-mib) is enforced by the OS on each probe.")
    p.add_argument("--framework", required=True, help="adapter name, e.g. pytorch (`batchscope adapters`)")
    p.add_argument("--model", required=True, help="model from the catalogue (e.g. deep_cnn, resnet20) or your own "
                   "\"package.module:function\" (docs/models.md)")
    p.add_argument("--dataset", default="synthetic", help="data set (default synthetic)")
    p.add_argument("--synthetic-shape", type=_shape, default=(3, 32, 32), help="C,H,W of synthetic input")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--strategy", choices=STRATEGIES, default="model",
                   help="model: fit memory(batch) from small probes and probe near the prediction (default); "
                        "double-bisect: 1, 2, 4, ... then bisect, as Lightning's binsearch")
    p.add_argument("--memory-limit-mib", type=float, default=0.0,
                   help="the budget: on a GPU an emulated smaller card (default: the whole card); on CPU "
                        "required, enforced on each probe by the OS (RLIMIT_DATA)")
    p.add_argument("--margin-mib", type=float, default=0.0,
                   help="memory to leave unused in the recommended batch size (default 0)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (its state counts; default 0.9)")
    p.add_argument("--threads", type=int, default=0, help="framework threads per probe (0: its default)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="per probe (default 300)")
    p.add_argument("--max-batch-cap", type=int, default=1 << 16, help="stop searching above this size")
    p.add_argument("--out", help="output directory for the store (default results/maxbatch)")
    p.add_argument("--data-dir", help="local copy of a downloadable data set")
    p.add_argument("--data-layout", choices=DATA_LAYOUTS, default="auto",
                   help="image layout of an npz:FILE data set (default: detected from the channel axis)")
    p.set_defaults(func=cmd_maxbatch)


def _check_numbers(args: argparse.Namespace) -> None:
    """Numbers the probes cannot use (inf, nan, an OS limit beyond what setrlimit takes, negatives), refused
    with the flag before anything starts."""
    import math

    from harness.config.experiment import MAX_MEMORY_LIMIT_MIB, MAX_TIMEOUT_S, SQLITE_INT_MAX

    for flag, value, low, high in (("--memory-limit-mib", args.memory_limit_mib, 0.0, MAX_MEMORY_LIMIT_MIB),
                                   ("--margin-mib", args.margin_mib, 0.0, MAX_MEMORY_LIMIT_MIB),
                                   ("--timeout-s", args.timeout_s, 1e-3, MAX_TIMEOUT_S),
                                   ("--momentum", args.momentum, 0.0, 1.0)):
        if not math.isfinite(value):
            raise ConfigError(f"{flag} {value!r} must be a finite number")
        if value < low:
            raise ConfigError(f"{flag} {value!r} must be >= {low:g}")
        if value > high:
            raise ConfigError(f"{flag} {value:g} is more than the largest usable value ({high:g})")
    for flag, number in (("--threads", args.threads), ("--max-batch-cap", args.max_batch_cap)):
        if number < 0:
            raise ConfigError(f"{flag} {number!r} must be >= 0")
        if number > SQLITE_INT_MAX:
            raise ConfigError(f"{flag} {number} is larger than the store can hold ({SQLITE_INT_MAX})")
    from harness.data import DATASETS

    if args.dataset.startswith("npz:"):  # a user's file: its contents are checked when it is prepared
        from harness.data.npzfile import check_path

        check_path(args.dataset)
    elif args.dataset not in DATASETS:
        raise ConfigError(f"--dataset {args.dataset!r} is not a known data set; known: {', '.join(sorted(DATASETS))}, "
                          "or npz:FILE")


def _fmt_int(value: int | None) -> str:
    return "-" if value is None else str(value)


def cmd_maxbatch(args: argparse.Namespace) -> int:
    """Run the search and print the answer beside the formula."""
    from harness.cli.table import shorten
    from harness.data import DataRequest, default_cache_dir, prepare
    from harness.maxbatch.prober import run_maxbatch
    from harness.maxbatch.request import MaxBatchRequest
    from harness.models import build_description, is_native_model
    from harness.monitor import environment
    from harness.registry import adapter_class, known_adapter_names
    from harness.store import Store
    from harness.store.db import make_out_dir
    from harness.store.lock import locked_out_dir

    if args.framework not in known_adapter_names():
        raise ConfigError(f"--framework {args.framework!r} is not a registered adapter; known: "
                          f"{', '.join(sorted(known_adapter_names()))}")
    from harness.models import check_model_name

    check_model_name(args.model)  # a user's "module:function" is imported here, framework imports refused
    _check_numbers(args)
    req = MaxBatchRequest(framework=args.framework, model=args.model, dataset=args.dataset,
                          precision=args.precision, device=args.device, strategy=args.strategy,
                          memory_limit_mib=args.memory_limit_mib, margin_mib=args.margin_mib,
                          timeout_s=args.timeout_s, optimizer=args.optimizer, momentum=args.momentum,
                          threads=args.threads, max_batch_cap=args.max_batch_cap,
                          synthetic_shape=args.synthetic_shape)
    out = Path(args.out or Path("results") / "maxbatch")
    env = environment.capture()
    from harness.maxbatch.prober import probe_peak_mib
    from harness.maxbatch.request import resolve_budget

    budget = resolve_budget(req, list(env.get("gpus") or []))  # refuse bad options before writing anything
    adapter_class(req.framework)
    # data and model before the store: a bad file or a model that does not fit the input leaves nothing written
    data = prepare(DataRequest(name=req.dataset, seed=req.seed, train_samples=req.train_samples,
                               synthetic_shape=req.synthetic_shape, synthetic_classes=req.synthetic_classes,
                               synthetic_samples=req.synthetic_samples, data_dir=args.data_dir,
                               layout=args.data_layout), default_cache_dir())
    desc = None if is_native_model(req.model) else build_description(req.model, data.input_shape, data.classes)
    print(f"maxbatch: {req.framework} {req.model} on {budget.device}, budget {budget.mib:.0f} MiB "
          f"({budget.kind}), strategy {req.strategy}; every probe is a fresh worker", flush=True)
    if desc is not None:
        print_forecast(desc, req, budget.mib)
    else:
        print("native model (the framework's own): no forecast, since there is no description to size; the "
              "parameter count is the framework's, and no comparison across frameworks is made", flush=True)

    def on_probe(o: Any) -> None:
        peak = probe_peak_mib(o, budget.kind) if o.status == "ok" else None
        extra = (f"peak {peak:.0f} MiB" if peak is not None else "") if o.status == "ok" else shorten(o.reason, 110)
        kind = "confirm" if o.trial.timed_steps == req.confirm_steps else "probe"
        print(f"  {kind:<7} bs={o.trial.batch_size:<6} {o.status:<8} {o.elapsed_s:5.1f} s  {extra}",
              flush=True)

    command = "batchscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # the adapter, the data and the model's fit to it were checked above, before the store is created
    make_out_dir(out)
    with locked_out_dir(out), Store.open(out) as store:
        run_id = store.begin_run(req.experiment, {"maxbatch": vars(args) | {"func": None}}, command, env)
        outcome = run_maxbatch(req, store, run_id, data=data, log_dir=out / "logs", on_probe=on_probe, env=env)
    print_result(outcome.row)
    print(f"\nstored in {out / 'results.sqlite'} (table maxbatch, probes in trials with purpose 'probe')")
    return 0


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


def print_result(row: dict[str, Any], file: Any = None) -> None:
    """The answer, in the words of the issue: fits / fails / recommended / probes / formula."""
    from harness.maxbatch.advice import answer_headroom_mib, jitter_advice

    file = file or sys.stdout
    fail = row["first_fail_batch"]
    print("", file=file)
    print(f"largest batch that fits (train + eval step): {row['max_batch']}"
          + ("  (every size up to --max-batch-cap fits)" if row.get("capped") else ""), file=file)
    if fail is not None:
        print(f"first size that fails: {fail}: {row['first_fail_status']}: {row['first_fail_reason']}",
              file=file)
    margin = f" with a {row['margin_mib']:g} MiB margin" if row["margin_mib"] else ""
    print(f"recommended{margin}: {row['recommended_batch']}  (power of two: "
          f"{_fmt_int(row['recommended_pow2'] or None)}, "
          f"multiple of 8: {_fmt_int(row['recommended_mult8'])})",
          file=file)
    spare = answer_headroom_mib(row)
    if spare is not None:
        print(f"memory left unused at {row['max_batch']}: {spare:.1f} MiB of {row['budget_mib']:.0f} MiB "
              f"({row['budget_kind']})", file=file)
    advice = jitter_advice(row)
    if advice is not None:
        print(f"note: {advice}", file=file)
    print(f"probes: {row['probes_n']} fresh workers, {row['wall_s']:.1f} s ({row['strategy']})", file=file)
    if row["fit_b_mib_per_sample"] is not None:
        print(f"measured memory: {row['fit_a_mib']:.0f} MiB + {row['fit_b_mib_per_sample']:.3f} MiB "
              "per sample", file=file)
    err = row["formula_error_pct"]
    print(f"seed's formula, (budget {row['budget_mib']:.0f} - model state "
          f"{row['model_state_mib']:.1f} MiB) / "
          f"{row['per_sample_activation_mib']:.3f} MiB per sample, power of two: {row['formula_batch']}"
          + (f"  ({err:+.0f}% vs measured)" if err is not None else ""), file=file)
    aerr = row.get("formula_analytic_error_pct")
    if row.get("analytic_activation_mib_per_sample") is None:  # a native model has no description to size
        return
    print(f"  with the analytic activation size "
          f"({row['analytic_activation_mib_per_sample']:.3f} MiB per sample): "
          f"{row['formula_analytic_batch']}" + (f"  ({aerr:+.0f}% vs measured)" if aerr is not None else ""),
          file=file)
