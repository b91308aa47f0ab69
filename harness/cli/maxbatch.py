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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.maxbatch_output import (
    ProbePrinter,
    print_answer,
    print_plan,
)
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
from harness.cli.table import path_arg
from harness.config.limits import DEFAULT_SETTLE_STEPS
from harness.errors import ConfigError

if TYPE_CHECKING:  # the search's modules are imported when a command runs
    from harness.maxbatch.request import MaxBatchRequest
    from harness.registry import Registered


def shape_arg(text: str) -> tuple[int, int, int]:
    """``C,H,W`` (or ``CxHxW``) as an argparse type: three whole numbers > 0, refused in words otherwise."""
    try:
        parts = tuple(int(x) for x in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W (e.g. 3,32,32)") from None
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not C,H,W with three whole numbers > 0")
    return parts  # type: ignore[return-value]


# ---------------------------------------------------------------- the command line's settings, read and checked
def parse_adapter_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line; the value read as a TOML scalar (``true``, ``128``, ``0.5``), else
    as the text itself (``preallocate``), as it would be written under ``[adapters.<name>]``."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise ConfigError(f"--adapter-option {text!r} is not KEY=VALUE (e.g. memory_mode=preallocate)")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw
    if isinstance(value, (list, dict)):
        raise ConfigError(f"--adapter-option {text!r}: the value must be one word, number or true/false")
    return key, value


def adapter_options(pairs: Sequence[str], adapter_cls: Any) -> dict[str, Any]:
    """The ``--adapter-option`` settings, checked by the adapter (its ``validate_options``, no framework import).

    Refused: a key given twice, an unknown key or value, and a value equal to the adapter's default (the plain
    search already runs with it, so the comparison would compare a search with itself).
    """
    from harness.maxbatch.whathelps import word

    options: dict[str, Any] = {}
    for text in pairs:
        key, value = parse_adapter_option(text)
        if key in options:
            raise ConfigError(f"--adapter-option {key} is given twice ({word(options[key])} and {word(value)}); "
                              "give each setting once")
        options[key] = value
    try:
        adapter_cls.validate_options(options)
        defaults = adapter_cls.validate_options({})
    except ConfigError as e:
        raise ConfigError(f"--adapter-option: {e}") from None
    for key, value in options.items():
        if key in defaults and defaults[key] == value:
            raise ConfigError(f"--adapter-option {key}={word(value)} is the {adapter_cls.name} adapter's default, "
                              "which the plain search runs with already; give another value, or leave it out")
    return options


def parse_env_settings(pairs: Sequence[str]) -> dict[str, str]:
    """The ``--env KEY=VALUE`` settings: each an allocator variable (advice.ALLOCATOR_VARS: what decides how a
    framework or the C library allocates, so a row never names a variable that cannot change its answer), once."""
    from harness.records import ALLOCATOR_VARS

    env: dict[str, str] = {}
    for text in pairs:
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(f"--env {text!r} is not KEY=VALUE (e.g. MALLOC_MMAP_THRESHOLD_=131072)")
        if key not in ALLOCATOR_VARS:
            raise ConfigError(f"--env {key}: not an allocator setting batchscope knows; one of: "
                              f"{', '.join(ALLOCATOR_VARS)}")
        if key in env:
            raise ConfigError(f"--env {key} is given twice ({env[key]} and {value}); give each setting once")
        env[key] = value
    return env


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
    """One straight line, in the order the user sees it: the adapter looked up once, the request made and checked
    against it, the framework's runtime resolved (its interpreter, built on first use), the plan built on the budget
    (data, model, settings to try) and its forecast printed, then the searches run under one store and the answer
    printed. Nothing is written before every check has passed."""
    from harness.envs.runtime import command_runtimes, flag_interpreters
    from harness.maxbatch.searching import DataSource, MaxBatchPlan
    from harness.monitor import environment

    req, adapter = _request(args)
    out = Path(args.out or Path("results") / "maxbatch")
    env = environment.capture()
    runtime = command_runtimes([req.framework], flag_interpreters(args.python), bool(env.get("gpus")), _say,
                               {req.framework: adapter})[req.framework].usable()  # a failed build: exit 1
    plan = MaxBatchPlan.build(req, runtime, env, data=DataSource(args.data_dir, args.data_layout),
                              log_dir=out / "logs", include_plain=not args.no_plain)
    print_plan(plan)
    shown = ProbePrinter(plan, quiet=args.quiet)
    command = "batchscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    started = time.monotonic()
    try:  # every check above passed: the output directory is the first thing written
        done = plan.run_in(out, shown, command, {"maxbatch": vars(args) | {"func": None}})
    except KeyboardInterrupt:
        # Here, not in the CLI's generic handler: that one suggests --resume, which maxbatch does not have (a
        # search's probes depend on each other, so there is nothing to resume from; issue 13, item 14).
        print(f"\nbatchscope: interrupted. The probes that finished are stored in {out / 'results.sqlite'} "
              "(trials with purpose 'probe'); maxbatch has no --resume: run the same command again to search "
              "from the start.", file=sys.stderr)
        return 130
    return print_answer(done, plan.compare, out, args.verify, time.monotonic() - started)


def _say(line: str) -> None:
    print(f"environment {line}", flush=True)


def _request(args: argparse.Namespace) -> tuple[MaxBatchRequest, Registered]:
    """The search the command line asks for, every argument checked, against the adapter ``--framework`` names too
    (ConfigError: exit 2, nothing written), and that adapter: the registry read once, here."""
    from harness.maxbatch.request import CONFIRM_STEPS, MaxBatchRequest
    from harness.models import check_model_name
    from harness.registry import lookup

    adapter = lookup(args.framework, asked_as="--framework")
    options = adapter_options(args.adapter_option, adapter.cls)
    env_setting = parse_env_settings(args.env_setting)
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
                           granularity=args.granularity).check_adapter(adapter.cls), adapter
