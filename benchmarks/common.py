"""Shared pieces of the benchmark scripts: machine facts, a harness trial, a bare-loop run.

The benchmark parent, like the harness parent, imports no framework: harness trials run in the real
worker (``LocalExecutor``), bare loops in ``bare_loop.py`` subprocesses, each a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.base import OptimizerSpec  # noqa: E402
from harness.config.trial import TrialSpec  # noqa: E402
from harness.data import DataRequest, PreparedData, prepare  # noqa: E402
from harness.envs.resolve import Interpreter, managed_interpreter  # noqa: E402
from harness.envs.spec import chosen_kind  # noqa: E402
from harness.monitor import environment  # noqa: E402
from harness.records import PROGRESS_INTERVAL_S, TrialOutcome, TrialUnit  # noqa: E402
from harness.registry import adapter_class, adapter_target  # noqa: E402
from harness.run.executor import LocalExecutor  # noqa: E402
from harness.run.sweep import worker_env  # noqa: E402


@cache
def interpreter(framework: str) -> Interpreter:
    """The interpreter ``framework``'s trials run in, as a sweep chooses it (its managed environment, built on first
    use): the benchmarks measure what ``batchscope run`` runs, in the same environment (issue 38)."""
    chosen = managed_interpreter(framework, chosen_kind(bool(environment.capture().get("gpus"))),
                                 say=lambda line: print(line, file=sys.stderr, flush=True))
    if chosen.problem:
        raise RuntimeError(chosen.problem)
    return chosen

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
SHAPE = (1, 28, 28)  # MNIST-sized, the seed study's input
CLASSES = 10
OPTIMIZER = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9)


def frameworks_option(parser: Any, text: str) -> list[str]:
    """The comma-separated ``--frameworks`` value as a list; an unknown name is a usage error (exit 2)."""
    frameworks = [f for f in text.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown framework(s) {unknown}; choose from {', '.join(FRAMEWORKS)}")
    return frameworks


def machine_facts() -> str:
    """A few lines saying where the figures were taken (framework versions from metadata, no import)."""
    env = environment.capture()
    versions = []
    for fw in FRAMEWORKS:  # read in each framework's environment (the parent holds none)
        try:
            facts = interpreter(fw).facts
        except RuntimeError:
            continue
        versions.append(f"{facts.get('distribution') or fw} {facts.get('framework_version')} "
                        f"(numpy {facts.get('numpy')}, {interpreter(fw).environment})")
    load = os.getloadavg()
    return "\n".join(
        [
            f"machine: {env['cpu_model']}, {env['cpu_count']} CPUs, {env['ram_gib']} GiB RAM",
            f"GPU: {env['gpu_note']}",
            f"python {env['python']} on {env['os']}; {', '.join(versions)}",
            f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
            "(other work on the machine makes figures noisy: compare only within one run)",
        ]
    )


def synthetic_data(samples: int = 2048) -> PreparedData:
    """The benchmark data set, prepared once in a private cache."""
    cache = Path(os.environ.get("BATCHSCOPE_BENCH_CACHE", Path(tempfile.gettempdir()) / "batchscope-bench"))
    return prepare(
        DataRequest(
            name="synthetic", synthetic_shape=SHAPE, synthetic_classes=CLASSES, synthetic_samples=samples
        ),
        cache,
    )


def bench_unit(
    framework: str, data: PreparedData, batch_size: int, threads: int, warmup: int, steps: int,
    progress_interval_s: float | None = PROGRESS_INTERVAL_S, extra_env: dict[str, str] | None = None,
    prefetch: bool = True,
) -> TrialUnit:
    """The unit of a benchmark's harness trial, its worker environment built exactly as a sweep's is.

    The environment is ``harness.run.sweep.worker_env`` of the trial (the one function the sweep uses: issue 22, so
    a setting a sweep's workers get cannot hide from ``make bench`` again), plus ``extra_env``, a setting a
    benchmark compares on purpose (``harness_overhead.py --allocator-compare``). ``prefetch``: the trial's key
    (``harness_overhead.py --prefetch-compare`` turns it off on one side).
    """
    trial = TrialSpec(
        experiment="bench",
        framework=framework,
        model="osu_cnn",
        dataset="synthetic",
        batch_size=batch_size,
        repeat=0,
        seed=0,
        epochs=0,
        warmup_steps=warmup,
        timed_steps=steps,
        optimizer=OPTIMIZER,
        device="cpu",
        threads=threads,
        timeout_s=600.0,
        eval=False,
        data_key=data.key,
        prefetch=prefetch,
    )
    return TrialUnit(
        trial=trial,
        data=data,
        order_path=str(data.write_order(0, 0)),
        adapter_target=adapter_target(framework),
        python=interpreter(framework).python,
        oom_patterns=adapter_class(framework).oom_stderr_patterns,
        progress_interval_s=progress_interval_s,  # None: the worker sends no progress (the bare-harness figure)
        env=worker_env(trial, environment.capture()) | dict(extra_env or {}),
        pythonpath=interpreter(framework).pythonpath,
        environment=interpreter(framework).environment,
    )


def harness_trial(
    framework: str, data: PreparedData, batch_size: int, threads: int, warmup: int, steps: int,
    on_event: Callable[[Any], None] | None = None,  # every worker message, typed (harness.run.protocol)
    progress_interval_s: float | None = PROGRESS_INTERVAL_S,
    extra_env: dict[str, str] | None = None,
    bounded_log: bool = True,
    prefetch: bool = True,
) -> TrialOutcome:
    """One real harness trial (fresh worker, :func:`bench_unit`: the sweep's worker environment); raises if it did
    not end ok.

    ``bounded_log`` False: the worker writes its log file itself, as before issue 24 (``worker_log_cost.py``).
    ``extra_env``: a setting on top of the sweep's environment, compared on purpose.
    """
    unit = bench_unit(framework, data, batch_size, threads, warmup, steps, progress_interval_s, extra_env, prefetch)
    outcome = LocalExecutor(log_dir=Path(tempfile.gettempdir()) / "batchscope-bench-logs",
                            bounded_log=bounded_log).run(unit, on_event)
    if outcome.status != "ok":
        raise RuntimeError(
            f"{framework} harness trial at batch {batch_size}: {outcome.status}: {outcome.reason}\n"
            f"{outcome.stderr_tail}"
        )
    return outcome


def bare_loop(
    framework: str, batch_size: int, threads: int, warmup: int, steps: int, sync_each_step: bool = False
) -> dict[str, Any]:
    """One run of ``bare_loop.py`` in a fresh interpreter; its JSON answer."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2") | interpreter(framework).worker_env()
    proc = subprocess.run(
        [
            interpreter(framework).python,  # the same environment as the harness's worker: like for like
            str(ROOT / "benchmarks" / "bare_loop.py"),
            "--framework",
            framework,
            "--batch",
            str(batch_size),
            "--threads",
            str(threads),
            "--warmup",
            str(warmup),
            "--steps",
            str(steps),
            "--shape",
            ",".join(map(str, SHAPE)),
            "--classes",
            str(CLASSES),
            *(["--sync-each-step"] if sync_each_step else []),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bare {framework} loop failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def median(values: list[float]) -> float:
    """Median (for the printed figures)."""
    return statistics.median(values)
