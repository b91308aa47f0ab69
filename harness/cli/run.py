"""``batchscope run``: a sweep over frameworks and batch sizes, then (``max_batch = true``) the searches."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.progress import make_progress, planned_work
from harness.cli.table import _csv_ints, _csv_names, path_arg, print_table
from harness.config.choices import MATH_MODES
from harness.run.listener import SweepListener

if TYPE_CHECKING:
    from harness.config.experiment import Experiment
    from harness.config.trial import TrialSpec
    from harness.data import PreparedData
    from harness.records import TrialOutcome
    from harness.registry import Registered
    from harness.run.protocol import Message
    from harness.run.sweep import SweepResult


# ---------------------------------------------------------------- run
def cmd_run(args: argparse.Namespace) -> int:
    """``batchscope run``: the experiment with the command line's overrides, run and stored, then summarised."""
    from harness.monitor.sampler import monitor_factory_for
    from harness.pipeline import run_experiment
    from harness.run.sweep import SweepOptions

    exp, registered = _experiment(args)
    if args.ray_address:
        args.executor = "ray"
    out = Path(args.out or Path("results") / exp.name)
    command = "batchscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    factory, notice = monitor_factory_for(exp)
    if notice:
        print(notice)

    variants = f"{len(exp.variants)} variant(s) x " if exp.variants else ""
    print(f"experiment {exp.name!r} from {exp.source}: {len(exp.frameworks)} framework(s) x {variants}"
          f"{len(exp.batch_sizes)} batch size(s) x {exp.repeats} repeat(s) -> {out}")
    executor = None
    if args.executor == "ray":
        from harness.run.ray_executor import RayExecutor

        executor = RayExecutor(address=args.ray_address, monitor_factory=factory, log_dir=out.resolve() / "logs",
                               trials_per_node=args.trials_per_node, max_concurrent=args.max_concurrent)
    elif args.trials_per_node != 1 or args.max_concurrent is not None:
        from harness.errors import ConfigError

        raise ConfigError("--trials-per-node and --max-concurrent are for --executor ray (--ray-address); the local "
                          "executor runs one trial at a time, so that two timed trials never share this machine")
    with make_progress(quiet=args.quiet) as display:  # rich bars on a terminal, plain lines otherwise
        options = SweepOptions(resume=args.resume, data_dir=args.data_dir, command=command, monitor_factory=factory,
                               executor=executor, registered=registered)
        result = run_experiment(exp, out, options, _Shown(display))
    _say_result(result, exp.name, out)
    if result.maxbatch_errors:  # a search asked for (max_batch = true) that could not search: the run failed
        print(f"batchscope: {len(result.maxbatch_errors)} max-batch search(es) failed (see 'max batch' above); the "
              "sweep's trials are stored", file=sys.stderr)
        return 1
    return 0


def _experiment(args: argparse.Namespace) -> tuple[Experiment, dict[str, Registered]]:
    """The experiment this command runs: the file with the command line's overrides, checked against the adapter of
    each name it holds, looked up in the registry once (issue 51; the sweep resolves its runtimes with the same
    lookups). Refused (exit 2, nothing built or written): a bad value (a flag's named as the flag), an adapter that
    cannot be loaded or would not run what is asked, an interpreter that cannot be used."""
    from harness.config.experiment import adapter_names, check_adapters, read_experiment
    from harness.registry import lookup_each

    flags = {key: value for key, value in {
        "model": args.model, "frameworks": args.frameworks, "batch_sizes": args.batch_sizes, "device": args.device,
        "repeats": args.repeats, "epochs": args.epochs, "math_mode": args.math_mode,
        "skip_larger_after_oom": False if args.no_skip_larger else None,
        "allow_mixed_devices": True if args.allow_mixed_devices else None}.items() if value is not None}
    exp = read_experiment(args.experiment).with_overrides(**flags)  # every value that needs no adapter
    registered = lookup_each(adapter_names(exp))
    exp = check_adapters(exp, {name: found.cls for name, found in registered.items()}, flags)
    if args.python:
        from harness.envs.runtime import parse_python_options

        exp = exp.with_interpreters(parse_python_options(args.python))
    return exp, registered


def _say_result(result: SweepResult, experiment: str, out: Path) -> None:
    """What the sweep did beyond its live lines (trials at once, not run, skipped, each max-batch answer), then
    the stored cells' summary table and where the store is."""
    from harness.cells import SUMMARY_COLUMNS, summary_note
    from harness.maxbatch.advice import jitter_advice, train_advice
    from harness.run.sweep import summarise
    from harness.store import Store

    if result.peak_in_flight > 1:
        print(f"up to {result.peak_in_flight} trials ran at once (their progress lines interleave)")
    if result.not_run:
        print(f"{result.not_run} trial(s) not run: no Ray node with the resources they need was left; "
              "run again with --resume to finish them")
    if result.already_done:
        print(f"{result.already_done} trial(s) already stored: skipped (--resume)")
    for row in result.maxbatch:  # max_batch = true: one search per framework after the sweep
        print(f"max batch {row.framework}: {row.answer.max_batch} fits, {row.answer.fail_batch} fails "
              f"({row.budget_mib:.0f} MiB {row.budget_kind}; {row.probes.n} probes, "
              f"{row.probes.wall_s:.0f} s; formula {row.formula.batch})")
        for advice in (jitter_advice(row), train_advice(row)):
            if advice is not None:
                print(f"max batch {row.framework}: note: {advice}")
    for note in result.maxbatch_notes:
        print(f"max batch {note}")
    with Store.open(out, create=False) as store:
        stored = store.trials("experiment = ?", (experiment,))
        rows = summarise(stored)
    print()
    print_table(rows, SUMMARY_COLUMNS)
    print("\n" + summary_note(stored))
    print(f"\nstored in {out / 'results.sqlite'}")


class _Shown(SweepListener):
    """The sweep as ``batchscope run`` shows it: each framework's device, then the live display's lines or bars."""

    def __init__(self, display: Any) -> None:
        self.display = display

    def on_devices(self, resolved: Sequence[Any]) -> None:  # device = "auto" resolved per framework, before any trial
        for r in resolved:
            print(f"device {r.line()}")

    def on_environment(self, line: str) -> None:  # a build, then where each framework runs, before any trial
        print(f"environment {line}", flush=True)

    def on_plan(self, todo: Sequence[TrialSpec], data: PreparedData) -> None:
        self.display.plan(list(todo), planned_work(list(todo), data.n_train))

    def on_trial_start(self, i: int, n: int, trial: TrialSpec) -> None:
        self.display.start(i, n, trial)

    def on_trial_message(self, trial: TrialSpec, msg: Message) -> None:
        self.display.event(trial, msg)

    def on_trial_complete(self, i: int, n: int, outcome: TrialOutcome) -> None:
        self.display.done(i, n, outcome)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of 1 or more")
    return value


def register(sub: Any) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser("run", help="run an experiment file (a sweep over frameworks and batch sizes)")
    p.add_argument("experiment", type=path_arg("EXPERIMENT"), help="experiment TOML file, e.g. experiments/quick.toml")
    p.add_argument("--out", type=path_arg("--out"), help="output directory (default: results/<experiment name>)")
    p.add_argument("--model", help="override the experiment's model: a catalogue name (e.g. resnet20) or your "
                   "own \"package.module:function\" (docs/models.md)")
    p.add_argument("--frameworks", type=_csv_names, help="only these frameworks, e.g. pytorch,mxnet")
    p.add_argument("--batch-sizes", type=_csv_ints, help="only these batch sizes, e.g. 4,8,16")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), help="override the experiment's device")
    p.add_argument("--math-mode", choices=MATH_MODES, help="override the experiment's math_mode: ieee (true float32 on "
                   "a GPU, the default), tf32 (TensorFloat-32 tensor cores) or framework-default (docs/precision.md)")
    p.add_argument("--allow-mixed-devices", action="store_true",
                   help="run frameworks whose builds land on different devices (one on the GPU, one on the CPU); "
                   "every table and verdict then compares within one device only (default: refused)")
    p.add_argument("--python", action="append", default=[], metavar="FRAMEWORK=PATH",
                   help="run FRAMEWORK's trials in this interpreter (your own environment, checked before the first "
                        "trial) instead of batchscope's managed one; repeat for several frameworks")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--epochs", type=int, help="override the number of epochs")
    p.add_argument("--resume", action="store_true",
                   help="skip trials already stored in --out (those that ended in error, or ran on another device "
                   "than their framework resolves to now, run again)")
    p.add_argument("--no-skip-larger", action="store_true",
                   help="run batch sizes above one that ran out of memory (default: record them as skipped)")
    p.add_argument("--data-dir", type=path_arg("--data-dir"),
                   help="local copy of a downloadable data set (e.g. cifar-10-python.tar.gz)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where trials run: here (default) or as tasks on a Ray cluster")
    p.add_argument("--ray-address",
                   help="Ray cluster address (default: start a local one, even where `ray start` left a cluster "
                   "running here; `auto` joins that one; RAY_ADDRESS is honoured); implies --executor ray")
    p.add_argument("--max-concurrent", type=_positive, metavar="N",
                   help="Ray: at most N trials at once (default: as many as the cluster has GPUs, or CPU nodes)")
    p.add_argument("--trials-per-node", type=_positive, default=1, metavar="N",
                   help="Ray, CPU trials: N trials share a node's CPUs (default 1: a timed trial has its node's cores "
                   "to itself); recorded per trial and named in the report")
    p.add_argument("--quiet", action="store_true",
                   help="plain lines instead of live progress bars (the default when stdout is not a terminal)")
    p.set_defaults(func=cmd_run)
