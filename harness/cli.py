"""The ``batchscope`` command line.

Exit codes: 0 the command did its job (a sweep with oom trials included); 2 usage, configuration or
data errors (nothing written); 3 the model does not fit at batch 1; 1 internal errors; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import __version__
from harness.errors import BatchscopeError, ConfigError

Command = Callable[[argparse.Namespace], int]


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None


def _csv_names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def print_table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str, str]], file: Any = None) -> None:
    """Print rows as a plain aligned table; columns are (key, header, format)."""
    file = file or sys.stdout
    cells = [[h for _, h, _ in columns]] + [[_fmt(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for n, row in enumerate(cells):
        padded = (c.rjust(w) if n and i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        print("  ".join(padded).rstrip(), file=file)


# ---------------------------------------------------------------- run
def cmd_run(args: argparse.Namespace) -> int:
    from harness.maxbatch import jitter_advice
    from harness.runner import run_sweep, summarise
    from harness.sampler import monitor_factory_for
    from harness.spec import load_experiment
    from harness.store import Store

    exp = load_experiment(args.experiment)
    if args.ray_address:
        args.executor = "ray"
    exp = exp.with_overrides(frameworks=args.frameworks, batch_sizes=args.batch_sizes, device=args.device,
                             repeats=args.repeats, epochs=args.epochs,
                             skip_larger_after_oom=False if args.no_skip_larger else None)
    out = Path(args.out or Path("results") / exp.name)
    command = "batchscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    factory, notice = monitor_factory_for(exp)
    if notice:
        print(notice)

    def on_start(i: int, n: int, trial: Any) -> None:
        print(f"[{i:>3}/{n}] {trial.framework:<11} bs={trial.batch_size:<5} rep {trial.repeat} running...",
              end="\r" if sys.stdout.isatty() else "\n", flush=True)

    def progress(i: int, n: int, o: Any) -> None:
        m = o.metrics
        extra = f"{_fmt(m.get('samples_per_s'))} samples/s" if o.status == "ok" else o.reason[:90]
        acc = f"  acc {m['accuracy']:.3f}" if m.get("accuracy") is not None else ""
        print(f"[{i:>3}/{n}] {o.trial.framework:<11} bs={o.trial.batch_size:<5} rep {o.trial.repeat} "
              f"{o.status:<8} {extra}{acc}  ({o.elapsed_s:.1f} s)", flush=True)

    print(f"experiment {exp.name!r} from {exp.source}: {len(exp.frameworks)} framework(s) x "
          f"{len(exp.batch_sizes)} batch size(s) x {exp.repeats} repeat(s) -> {out}")
    executor = None
    if args.executor == "ray":
        from harness.ray_executor import RayExecutor

        executor = RayExecutor(address=args.ray_address, monitor_factory=factory, log_dir=out.resolve() / "logs")
    result = run_sweep(exp, out, resume=args.resume, data_dir=args.data_dir, command=command,
                       monitor_factory=factory, progress=progress, on_start=on_start, executor=executor)
    if result.already_done:
        print(f"{result.already_done} trial(s) already stored: skipped (--resume)")
    for row in result.maxbatch:  # max_batch = true: one search per framework after the sweep
        print(f"max batch {row['framework']}: {row['max_batch']} fits, {row['first_fail_batch']} fails "
              f"({row['budget_mib']:.0f} MiB {row['budget_kind']}; {row['probes_n']} probes, "
              f"{row['wall_s']:.0f} s; formula {row['formula_batch']})")
        advice = jitter_advice(row)
        if advice is not None:
            print(f"max batch {row['framework']}: note: {advice}")
    for note in result.maxbatch_notes:
        print(f"max batch {note}")
    with Store.open(out, create=False) as store:
        rows = summarise(store.trials("experiment = ?", (exp.name,)))
    print()
    print_table(rows, [("framework", "framework", ""), ("batch_size", "batch", "d"), ("status", "status", ""),
                       ("samples_per_s", "samples/s", ".1f"), ("step_time_ms_median", "step ms", ".2f"),
                       ("framework_peak_mib", "fw peak MiB", ".0f"), ("rss_peak_mib", "RSS MiB", ".0f"),
                       ("gpu_util_pct", "GPU %", ".1f"), ("accuracy", "accuracy", ".3f")])
    print(f"\nstored in {out / 'results.sqlite'}")
    return 0


# ---------------------------------------------------------------- adapters
def cmd_adapters(args: argparse.Namespace) -> int:
    from harness.registry import list_adapters

    rows = [{"name": a.name, "framework": a.distribution, "installed": "yes" if a.installed else "no",
             "version": a.version or "-", "target": a.target + (f"  ({a.problem})" if a.problem else "")}
            for a in list_adapters()]
    print_table(rows, [("name", "adapter", ""), ("framework", "framework", ""), ("installed", "installed", ""),
                       ("version", "version", ""), ("target", "entry point", "")])
    return 0


# ---------------------------------------------------------------- doctor
def cmd_doctor(args: argparse.Namespace) -> int:
    from harness.doctor import run_doctor

    return run_doctor()


# ---------------------------------------------------------------- export
def cmd_export(args: argparse.Namespace) -> int:
    from harness.export import export

    for path in export(Path(args.dir), args.format, Path(args.output) if args.output else None):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="batchscope", description="Measure training across batch sizes "
                                     "and frameworks, one worker process per trial.")
    parser.add_argument("--version", action="version", version=f"batchscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run an experiment file (a sweep over frameworks and batch sizes)")
    p.add_argument("experiment", help="experiment TOML file, e.g. experiments/quick.toml")
    p.add_argument("--out", help="output directory (default: results/<experiment name>)")
    p.add_argument("--frameworks", type=_csv_names, help="only these frameworks, e.g. pytorch,mxnet")
    p.add_argument("--batch-sizes", type=_csv_ints, help="only these batch sizes, e.g. 4,8,16")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), help="override the experiment's device")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--epochs", type=int, help="override the number of epochs")
    p.add_argument("--resume", action="store_true", help="skip trials already stored in --out")
    p.add_argument("--no-skip-larger", action="store_true",
                   help="run batch sizes above one that ran out of memory (default: record them as skipped)")
    p.add_argument("--data-dir", help="local copy of a downloadable data set (e.g. cifar-10-python.tar.gz)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where trials run: here (default) or as tasks on a Ray cluster")
    p.add_argument("--ray-address", help="Ray cluster address (default: start a local one); implies --executor ray")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("adapters", help="list registered adapters (imports no framework)")
    p.set_defaults(func=cmd_adapters)

    p = sub.add_parser("doctor", help="check Python, frameworks, pins and GPUs")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("export", help="export a results store to CSV or Parquet")
    p.add_argument("dir", help="output directory of a run (holds results.sqlite)")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")
    p.add_argument("-o", "--output", help="where to write (default: DIR/export)")
    p.set_defaults(func=cmd_export)

    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub: Any) -> None:
    """Commands that live in their own modules (compare, maxbatch, report) register here."""
    from harness.commands import register_all

    register_all(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``batchscope`` and ``python -m harness``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BatchscopeError as e:
        print(f"batchscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\nbatchscope: interrupted. Every finished trial is stored; run the same command with "
              "--resume to finish.", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - last resort: an internal error, reported with its traceback
        traceback.print_exc()
        print("batchscope: internal error (exit 1); please report it with the traceback above", file=sys.stderr)
        return 1


__all__ = ["main", "build_parser", "ConfigError"]
