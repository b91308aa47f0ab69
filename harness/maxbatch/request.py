"""What a max-batch search is asked for (:class:`MaxBatchRequest`): one framework, one model, the budget asked
for and how to search, checked when it is made (and against the adapter that will run it: :meth:`check_adapter`).
Where it runs and how its budget is enforced: :mod:`harness.maxbatch.budget`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.config.choices import (
    DEVICES,
    MATH_MODES,
    OPTIMIZERS,
    PRECISIONS,
    Device,
    MathMode,
    OptimizerName,
    Precision,
)
from harness.config.experiment import Experiment
from harness.config.limits import DEFAULT_SETTLE_STEPS, MAX_MEMORY_LIMIT_MIB, MAX_THREADS, MAX_TIMEOUT_S, SQLITE_INT_MAX
from harness.errors import ConfigError
from harness.maxbatch.search import CPU_RESOLUTION, GPU_RESOLUTION, STRATEGIES, Resolution

#: Timed steps of the confirm run (after one warm-up step), chosen from measurement (benchmarks/confirm_growth.py,
#: docs/maxbatch.md "How long the confirm run is"): long enough that the peak has stopped growing.
CONFIRM_STEPS = 8


#: the most micro-batches per update a search takes: every probe trains that many per step, so a larger k only
#: makes the probes slower (the peak stays the micro-batch's)
MAX_ACCUMULATE_STEPS = 1024

@dataclass(frozen=True)
class MaxBatchRequest:
    """What to search: one framework, one model, one budget."""

    framework: str
    model: str
    dataset: str = "synthetic"
    precision: Precision = "fp32"
    #: float32 convolutions and matmuls on a GPU (docs/precision.md, "Math mode"): cuDNN picks other algorithms, with
    #: other workspaces, under TF32, so the probes run under the math mode the training will
    math_mode: MathMode = "ieee"
    device: Device = "auto"
    strategy: str = "model"
    memory_limit_mib: float = 0.0  # 0: the card's memory (GPU only)
    margin_mib: float = 0.0
    timeout_s: float = 300.0  # per probe
    optimizer: OptimizerName = "sgd"
    momentum: float = 0.0
    learning_rate: float = 0.01
    threads: int = 0
    seed: int = 0
    probe_steps: int = 2  # timed steps of a probe (after one warm-up step)
    confirm_steps: int = CONFIRM_STEPS  # timed steps of the confirming run
    verify_steps: int = 0  # >0: after the search, train the recommended size this many steps in a fresh worker
    #: timed steps of each heap-settling run (CPU under glibc's default malloc): the training the answer must hold for
    settle_steps: int = DEFAULT_SETTLE_STEPS
    max_batch_cap: int = 1 << 16
    synthetic_shape: tuple[int, int, int] = (3, 32, 32)
    synthetic_classes: int = 10
    synthetic_samples: int = 2048
    train_samples: int = 0
    experiment: str = "maxbatch"
    python: str | None = None
    adapter_options: dict[str, Any] = field(default_factory=dict)
    #: micro-batches per optimizer update: every probe trains k micro-batches of the probed size per step, so
    #: the answer is the largest micro-batch and the effective batch is k times it (issue 14, item 5)
    accumulate_steps: int = 1
    #: environment variables every probe gets on top of the parent's (issue 22: a "what helps" setting such as
    #: ``MALLOC_MMAP_THRESHOLD_=131072``; none by default, so the probes run under the allocator users train with)
    env: dict[str, str] = field(default_factory=dict)
    #: when the search stops (issue 31): None (or "") the default for the device (1 %; on a GPU multiples of 8 too), or
    #: the resolution asked for; given as text ("exact", "N%", "K" for multiples of K, "K,N%": the command line's
    #: --granularity, an experiment's max_batch_granularity) it is parsed once, when the request is made
    #: (harness.config.resolution.Resolution.parse), and held as the value from then on
    granularity: Resolution | str | None = None

    def resolution(self, device: str) -> Resolution:
        """The search's resolution on ``device`` ("cpu" or "gpu"): the one asked for, else the device's default."""
        if isinstance(self.granularity, Resolution):
            return self.granularity
        return GPU_RESOLUTION if device == "gpu" else CPU_RESOLUTION

    def search_cap(self, device: str) -> tuple[int, str]:
        """The cap on the resolution's grid on ``device`` ("cpu" or "gpu"), and a line saying so where that moved it
        ("" where it did not): a search that answers on multiples of K must not answer the cap off that grid (issue
        43: ``--max-batch-cap 20 --granularity 8`` stored 20). Below the step every size is on the grid (sizes below
        it are excepted from it), so no cap >= 1 leaves nothing."""
        res = self.resolution(device)
        cap = res.snap(self.max_batch_cap)
        if cap == self.max_batch_cap:
            return cap, ""
        return cap, (f"--max-batch-cap {self.max_batch_cap} is not on the resolution's grid (multiples of {res.step}, "
                     f"resolution {res.label}): the search stops at {cap}")

    def _check_numbers(self) -> None:
        """Numbers the probes cannot use (inf, nan, an OS limit beyond what setrlimit takes, what the store cannot
        hold), refused with the flag before anything starts: the one place the search's numbers are checked, for
        the command line and the experiment key alike."""
        import math

        for flag, value, low, high in (("--memory-limit-mib", self.memory_limit_mib, 0.0, MAX_MEMORY_LIMIT_MIB),
                                       ("--margin-mib", self.margin_mib, 0.0, MAX_MEMORY_LIMIT_MIB),
                                       ("--timeout-s", self.timeout_s, 1e-3, MAX_TIMEOUT_S),
                                       ("--momentum", self.momentum, 0.0, 1.0)):
            if not math.isfinite(value):
                raise ConfigError(f"{flag} {value!r} must be a finite number")
            if value < low:
                raise ConfigError(f"{flag} {value!r} must be >= {low:g}")
            if value > high:
                raise ConfigError(f"{flag} {value:g} is more than the largest usable value ({high:g})")
        for flag, number, low in (("--threads", self.threads, 0), ("--max-batch-cap", self.max_batch_cap, 1)):
            if number < low:  # one bound per flag, said once (issue 43: -1 was told ">= 0", then 0 ">= 1")
                raise ConfigError(f"{flag} {number!r} must be >= {low}")
            if number > SQLITE_INT_MAX:
                raise ConfigError(f"{flag} {number} is larger than the store can hold ({SQLITE_INT_MAX})")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"--threads {self.threads:,} is more than the largest usable value ({MAX_THREADS:,})")

    def _check_dataset(self) -> None:
        """A data set the search can prepare: a known name, or a user's npz file that exists (its contents are
        checked when it is prepared, still before any probe)."""
        from harness.data import DATASETS

        if self.dataset.startswith("npz:"):
            from harness.data.npzfile import check_path

            check_path(self.dataset)
        elif self.dataset not in DATASETS:
            raise ConfigError(f"--dataset {self.dataset!r} is not a known data set; known: "
                              f"{', '.join(sorted(DATASETS))}, or npz:FILE")

    def _check_precision_runs(self, cls: type[Any]) -> None:
        """Refuse a precision the adapter would not run on this device, and adapter settings that would do nothing
        there (a probe must never be recorded under a setting it did not use)."""
        from harness.config.precision import as_flags, validate_math_mode

        with as_flags():  # the refusals name the flags the user types, not the experiment file's keys
            try:
                cls.validate_precision(self.precision, self.device)
            except ConfigError as e:
                raise ConfigError(f"--precision {self.precision!r}: {e}") from None
            try:
                validate_math_mode(self.math_mode, self.device, self.framework, tuple(getattr(cls, "math_modes", ())),
                                   str(getattr(cls, "math_mode_note", "")))
            except ConfigError as e:
                raise ConfigError(f"--math-mode {self.math_mode!r}: {e}") from None
            check = getattr(cls, "validate_device_options", None)
            if check is not None and self.adapter_options:
                check(self.adapter_options, self.device)

    def _check_accumulation_runs(self, cls: type[Any]) -> None:
        """Refuse accumulation in an adapter without it, as the sweep's planner does: k plain steps are not one
        accumulated update, and their peak would be recorded as if they were."""
        if self.accumulate_steps == 1:
            return
        if not getattr(cls, "supports_accumulation", False):
            raise ConfigError(f"--accumulate-steps {self.accumulate_steps}: the {self.framework} adapter does not "
                              "implement gradient accumulation; leave --accumulate-steps out for it")

    def __post_init__(self) -> None:
        checks = (
            (self.strategy in STRATEGIES, f"--strategy {self.strategy!r} is not one of {STRATEGIES}"),
            (self.precision in PRECISIONS, f"--precision {self.precision!r} is not one of {PRECISIONS}"),
            (self.math_mode in MATH_MODES, f"--math-mode {self.math_mode!r} is not one of {', '.join(MATH_MODES)}"),
            (self.device in DEVICES, f"--device {self.device!r} is not one of {', '.join(DEVICES)}"),
            (self.optimizer in OPTIMIZERS, f"--optimizer {self.optimizer!r} is not one of {OPTIMIZERS}"),
            (self.memory_limit_mib >= 0, f"--memory-limit-mib {self.memory_limit_mib!r} must be >= 0"),
            (self.margin_mib >= 0, f"--margin-mib {self.margin_mib!r} must be >= 0"),
            (self.timeout_s > 0, f"--timeout-s {self.timeout_s!r} must be > 0"),
            (self.max_batch_cap >= 1, f"--max-batch-cap {self.max_batch_cap!r} must be >= 1"),
            (self.probe_steps >= 1 and self.confirm_steps >= 1, "probe and confirm steps must be >= 1"),
            (0 <= self.verify_steps <= 100_000, f"--verify-steps {self.verify_steps!r} must be in 1..100000"),
            (1 <= self.settle_steps <= 100_000, f"--settle-steps {self.settle_steps!r} must be in 1..100000"),
            (0 <= self.momentum < 1, f"--momentum {self.momentum!r} must be in [0, 1)"),
            (1 <= self.accumulate_steps <= MAX_ACCUMULATE_STEPS,
             f"--accumulate-steps {self.accumulate_steps!r} must be in 1..{MAX_ACCUMULATE_STEPS}"),
        )
        self._check_numbers()
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self._check_dataset()
        if isinstance(self.granularity, str):  # parsed here, once: refused before anything runs
            object.__setattr__(self, "granularity", Resolution.parse(self.granularity) if self.granularity else None)
        if self.memory_limit_mib and self.margin_mib >= self.memory_limit_mib:
            raise ConfigError(f"--margin-mib {self.margin_mib:g} leaves nothing of the "
                              f"{self.memory_limit_mib:g} MiB budget; give a smaller margin")

    def check_adapter(self, adapter: type[Any]) -> MaxBatchRequest:
        """This request, checked against the adapter that will run it (the class a command resolved once: the
        runtime's): a precision or math mode it would not run on the device asked for, adapter settings that would do
        nothing there, accumulation it does not implement (ConfigError, exit 2, nothing written). The request itself
        checks only what needs no adapter, so a request is made without reading the registry."""
        self._check_precision_runs(adapter)
        self._check_accumulation_runs(adapter)
        return self

    @classmethod
    def from_experiment(cls, exp: Experiment, framework: str) -> MaxBatchRequest:
        """The search a sweep with ``max_batch = true`` runs for ``framework`` after its trials."""
        settings = exp.adapters.get(framework)
        return cls(framework=framework, model=exp.model_for(framework), dataset=exp.dataset, precision=exp.precision,
                   math_mode=exp.math_mode, device=exp.device, memory_limit_mib=exp.memory_limit_mib,
                   timeout_s=exp.timeout_s,
                   optimizer=exp.optimizer, momentum=exp.momentum, learning_rate=exp.learning_rate,
                   threads=exp.threads, seed=exp.seed, synthetic_shape=exp.synthetic_shape,
                   synthetic_classes=exp.synthetic_classes, synthetic_samples=exp.synthetic_samples,
                   train_samples=exp.train_samples, experiment=exp.name, settle_steps=exp.max_batch_settle_steps,
                   granularity=exp.max_batch_granularity,
                   python=settings.python if settings else None,
                   adapter_options=dict(settings.options) if settings else {})
