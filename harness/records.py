"""Typed records at the seams between the layers: a trial unit going in, its outcome coming out.

The executor builds a :class:`TrialOutcome`, the monitor fills in what it measured, the store writes it.
This module imports nothing heavier than the trial spec, so every layer may depend on it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Protocol

from harness.config.trial import TrialSpec
from harness.data.prepared import PreparedData
from harness.noise import NoiseRecord

#: how a trial ended: ran to the end; out of memory; a Python error; killed at its timeout; the worker died
#: (signal, exit code, or it could not start); not run (larger than a size that ran out of memory); its training
#: diverged (a non-finite loss or weights: a result, with metrics and a curve up to there, never recommended); the
#: node it ran on died (Ray: ``lost``, never a result: re-run once on another node, else by ``--resume``)
Status = Literal["ok", "oom", "error", "timeout", "crashed", "skipped", "diverged", "lost"]
STATUSES: tuple[Status, ...] = ("ok", "oom", "error", "timeout", "crashed", "skipped", "diverged", "lost")
#: statuses that are not a trial's answer: ``--resume`` runs such a trial again (its row is replaced, never doubled)
UNFINISHED_STATUSES: tuple[Status, ...] = ("lost",)
#: the worker's default bound on progress messages: a few a second is live enough for a person, and the
#: check between steps is one comparison (docs/benchmarks.md: no measurable effect on the timing)
PROGRESS_INTERVAL_S = 0.5

#: environment variables that decide how a framework or the C library allocates, and so what a worker's memory and
#: speed are: the values a worker ran with are part of what it measured (issue 18: a max-batch answer holds only
#: under them; issue 22: a sweep records them). glibc's malloc tunables; PyTorch's caching allocator on a GPU;
#: TensorFlow's GPU memory mode and allocator, and its oneDNN CPU path (which halves the CPU answer: see
#: docs/maxbatch.md); JAX/XLA's preallocation; MXNet's GPU pool; the OpenMP threads that oneDNN scratch scales with.
ALLOCATOR_VARS = (
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "MALLOC_TOP_PAD_",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
    "TF_ENABLE_ONEDNN_OPTS", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR", "MXNET_GPU_MEM_POOL_TYPE", "MXNET_GPU_MEM_POOL_RESERVE", "OMP_NUM_THREADS",
)


def allocator_env(unit_env: Mapping[str, str], parent_env: Mapping[str, str]) -> dict[str, str]:
    """The allocator settings (:data:`ALLOCATOR_VARS`) a worker runs with: its environment is the parent's plus
    ``unit_env`` (harness/run/executor.py), so a variable from the user's shell counts as much as one set for it."""
    merged = {**parent_env, **unit_env}
    return {k: merged[k] for k in ALLOCATOR_VARS if k in merged}


def known_fields(cls: type, data: Mapping[str, Any], drop_null: bool = False) -> dict[str, Any]:
    """The items of ``data`` that are fields of the dataclass ``cls`` (a newer writer's extra keys are dropped);
    ``drop_null``: also a None where the field's default is not None (a NULL column reads as the field's default)."""
    keep = {f.name: f.default is None for f in fields(cls)}
    return {k: v for k, v in data.items() if k in keep and (v is not None or not drop_null or keep[k])}


@dataclass(frozen=True)
class MonitorResult:
    """What a monitor measured while a worker ran (the sampler fills it; :class:`NullMonitor` leaves it empty).

    ``aggregates`` are the trial row's sampler columns (named in :mod:`harness.monitor.fields`), ``phases``
    one summary per phase window, ``samples`` the raw phase-tagged samples (one dict per sample, columns of
    the ``samples`` table).
    """

    aggregates: Mapping[str, Any] = field(default_factory=dict)
    phases: Mapping[str, Any] = field(default_factory=dict)
    samples: Sequence[Mapping[str, Any]] = ()
    probes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    unsupported: Mapping[str, str] = field(default_factory=dict)
    gaps_n: int = 0
    missed_ticks: int = 0
    end_reason: str = ""
    interval_ms_median: float | None = None

    def summary(self) -> dict[str, Any]:
        """Everything but the raw samples, as plain data (the trial row's ``monitor_json``)."""
        out = dataclasses.asdict(self)
        out.pop("samples")
        return out


class Monitor(Protocol):
    """Watches a worker process while it runs (the sampler implements this)."""

    def start(self, pid: int) -> None:
        """The worker ``pid`` has started."""

    def phase(self, name: str, t_monotonic: float) -> None:
        """The worker announced ``name`` at ``t_monotonic``."""

    def stop(self) -> MonitorResult:
        """The worker is gone: stop and return what was measured (aggregates and raw samples)."""


class Executor(Protocol):
    """Runs trial units: :class:`LocalExecutor` here, :class:`harness.ray_executor.RayExecutor` on a cluster."""

    def run(self, unit: TrialUnit, on_event: Callable[[Any], None] | None = None) -> TrialOutcome:
        """Run one unit to completion and classify it; never raises for a trial's own failure. ``on_event`` gets
        every worker message as it arrives, typed (a :class:`harness.run.protocol.Message`)."""


class NullMonitor:
    """Measures nothing."""

    def start(self, pid: int) -> None:
        pass

    def phase(self, name: str, t_monotonic: float) -> None:
        pass

    def stop(self) -> MonitorResult:
        return MonitorResult()


@dataclass(frozen=True)
class TrialUnit:
    """One trial and everything needed to run it."""

    trial: TrialSpec
    data: PreparedData
    order_path: str
    adapter_target: str
    python: str = sys.executable
    oom_patterns: tuple[str, ...] = ()
    os_memory_limit_mib: float | None = None  # CPU budget: RLIMIT_DATA on the worker, enforced by the kernel
    env: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float | None = PROGRESS_INTERVAL_S  # progress messages at most this often; None: none
    #: where batchscope's code is for ``python`` (a folder of links, harness.envs): first on the worker's PYTHONPATH;
    #: empty: the project's root (the parent's own interpreter)
    pythonpath: tuple[str, ...] = ()
    #: how the trial row names the interpreter's environment (``managed pytorch-cpu@1a2b3c4d5e6f``, ``user``,
    #: ``parent``)
    environment: str = ""
    #: the managed environment ``python`` belongs to (a harness.envs.spec.EnvSpec): rebuilt where it is missing (it
    #: was deleted during the sweep, or this is another Ray node); None for a user's or the parent's interpreter
    env_spec: Any = None
    #: why this trial cannot run at all (its framework's environment failed to build): stored as an error, unstarted
    unavailable: str | None = None


@dataclass(frozen=True)
class StepEstimate:
    """A max-batch probe's framework estimate (issue 41; ``TrialSpec.estimate_batches``): the adapter's figure for one
    training step's peak at each of ``batches`` (``mib``, in the same order) and the ``seconds`` it took; or, where
    the adapter has none or it failed, ``error`` saying why (the probe's own result stands either way). Typed in the
    worker's result and the stored record; the store keeps it as JSON in ``step_estimate_json``, read and written
    there only."""

    batches: tuple[int, ...] = ()
    mib: tuple[float, ...] = ()
    seconds: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the protocol's and the store's JSON): the error alone where there is one."""
        if self.error is not None:
            return {"error": self.error}
        return {"batches": list(self.batches), "mib": list(self.mib), "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepEstimate:
        """From plain data (a protocol message, a stored column).

        Raises:
            ValueError: data that is no estimate (sizes and figures of different lengths, or not numbers).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"an estimate is a mapping, not {type(data).__name__}")
        if data.get("error") is not None:
            return cls(error=str(data["error"]))
        try:
            batches = tuple(int(b) for b in data.get("batches") or ())
            mib = tuple(float(m) for m in data.get("mib") or ())
            seconds = None if data.get("seconds") is None else float(data["seconds"])
        except (TypeError, ValueError) as e:
            raise ValueError(f"unreadable estimate {dict(data)!r}: {e}") from None
        if len(batches) != len(mib):
            raise ValueError(f"unreadable estimate {dict(data)!r}: {len(batches)} sizes, {len(mib)} figures")
        return cls(batches, mib, seconds)

    @property
    def points(self) -> tuple[tuple[int, float], ...]:
        """((batch, MiB), ...); () where there is an error."""
        return tuple(zip(self.batches, self.mib, strict=True))


@dataclass(frozen=True)
class ScheduleStretch:
    """One stretch of a batch-size schedule's trial (issue 52) at one size: its ``batch`` and the rate ``lr`` that
    ``lr_policy`` gives it, its ``first_step`` and the samples seen before it (``first_sample``), the ``steps`` it
    trained, its post-warm-up steps' median time (``step_ms_median``) and samples per second of step time (None
    where none of its steps was after the warm-up or ran), and ``switch_s``, what the change before it took (off the
    training clock; None for the first stretch). Typed in the worker's result and the stored record; the store keeps
    a trial's stretches as one JSON list in ``schedule_json``, read and written there only."""

    batch: int
    lr: float
    first_step: int
    first_sample: int
    steps: int
    step_ms_median: float | None = None
    step_samples_per_s: float | None = None
    switch_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (one item of the protocol's and the store's JSON list)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScheduleStretch:
        """From plain data (a protocol message, a stored column's item).

        Raises:
            ValueError: data that is no stretch (not a mapping, a figure missing or not a number).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a schedule stretch is a mapping, not {type(data).__name__}")

        def number(key: str) -> float | None:
            return None if data.get(key) is None else float(data[key])

        try:
            return cls(batch=int(data["batch"]), lr=float(data["lr"]), first_step=int(data["first_step"]),
                       first_sample=int(data["first_sample"]), steps=int(data["steps"]),
                       step_ms_median=number("step_ms_median"), step_samples_per_s=number("step_samples_per_s"),
                       switch_s=number("switch_s"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"unreadable schedule stretch {dict(data)!r}: {e!r}") from None


def schedule_from_data(data: object) -> tuple[ScheduleStretch, ...]:
    """A trial's stretches from plain data (a list of :meth:`ScheduleStretch.to_dict` items: the wire's, or a stored
    ``schedule_json`` column parsed by the store).

    Raises:
        ValueError: data that is no schedule (not a list, or an item that is no stretch).
    """
    if not isinstance(data, list | tuple):
        raise ValueError(f"a schedule's figures are a list, not {type(data).__name__}")
    return tuple(s if isinstance(s, ScheduleStretch) else ScheduleStretch.from_dict(s) for s in data)


@dataclass(frozen=True)
class WorkerMetrics:
    """What the worker measured in one trial, as it sends it to the parent (one field per ``trials`` column).

    Throughput: ``step_samples_per_s`` is the batch over the median time of every post-warm-up step's
    forward, backward and update; ``e2e_samples_per_s`` is every post-warm-up sample over the wall time
    of those steps, batch preparation included (see :mod:`harness.run.timing`). Drift compares the first
    and last tenth of the post-warm-up steps. Memory figures whose name says ``peak`` are highest values;
    the ``*_ready_mib`` and ``*_end_mib`` ones are readings before the first and after the last step.
    Every field has a default so that a test can build the few it needs; a real worker fills them all.
    """

    step_samples_per_s: float | None = None
    e2e_samples_per_s: float | None = None
    step_time_ms_median: float | None = None
    step_time_ms_iqr: float | None = None
    measured_steps_n: int = 0  # post-warm-up steps: what both throughput figures are taken over
    #: post-warm-up steps per clock reading: 1, the clock read after every step; k > 1, up to k steps queued and
    #: each given its window's mean time (an adapter with ``queued_steps``, issue 40). None: a worker from before
    step_clock_window: int | None = None
    drift_change_pct: float | None = None  # late vs early median step time; None: too few steps to tell
    drift_threshold_pct: float | None = None
    drift_flagged: bool | None = None
    warmup_steps_n: int = 0
    timed_steps_n: int = 0
    train_steps_n: int = 0
    optimizer_updates_n: int | None = None  # one per step; with accumulate_steps = k, k micro-batches each
    micro_batches_n: int | None = None  # forward/backward passes run
    epochs_done: float = 0.0
    #: the training thread's batch preparation, or (prefetch) its waits for the prepared batch, summed over steps.
    #: With queued steps (``step_clock_window`` > 1) a wait for the next batch overlaps the queued steps' work: a time
    #: the thread waited, not the device (MXNet at batch 512: 4.8 s of waits in a 9.3 s training, at the throughput
    #: of a clock after every step, whose waits were 0.006 s)
    data_s: float | None = None
    #: the next batch was prepared on a background thread while the step ran (the ``prefetch`` setting, as it
    #: ran); ``prefetch_device``: the adapter converted and copied it to the device there too (its
    #: ``prepare_batch_ahead`` hook), not only gathered it on the host. None: a worker from before issue 31
    prefetch: bool | None = None
    prefetch_device: bool | None = None
    setup_s: float | None = None
    train_s: float | None = None
    cpu_denormals: str = "unknown"  # what the CPU did with denormal floats: flush | keep | unknown
    #: the dtype the training forward pass computed in, observed by the adapter (float32 | bfloat16 | float16;
    #: None: not reported, fp32 only); the loss scale of the last update where float16 loss scaling ran
    compute_dtype: str | None = None
    loss_scale: float | None = None
    #: what float32 convolutions and matmuls computed in, read back from the framework (harness.config.precision
    #: MATH_MODES_SEEN: ieee | tf32 | conv-tf32 | matmul-tf32 | n/a off the GPU | unknown); None: not reported
    math_mode_seen: str | None = None
    train_flop_per_sample: float | None = None  # forward + backward, counted from the model description
    achieved_gflop_per_s: float | None = None  # train_flop_per_sample x step_samples_per_s
    framework_peak_mib: float | None = None
    framework_peak_source: str | None = None
    framework_reserved_mib: float | None = None
    #: what the worker held on the GPU outside its framework's allocator at the end of training (the CUDA context,
    #: kernels, library handles; adapters/gpumem.py), where the adapter measured it (issue 31)
    cuda_context_mib: float | None = None
    #: train-to-target trials (issue 33): ``reached`` (stopped at the first evaluation at or above the target) or
    #: ``not reached within N epochs`` (the budget ran out); None in any other trial
    target_outcome: str | None = None
    maxrss_mib: float | None = None
    vmdata_ready_mib: float | None = None
    rss_ready_mib: float | None = None
    rss_file_ready_mib: float | None = None
    rss_anon_ready_mib: float | None = None
    rss_file_end_mib: float | None = None
    rss_anon_end_mib: float | None = None
    vmdata_end_mib: float | None = None
    vmdata_peak_mib: float | None = None
    accuracy: float | None = None
    eval_loss: float | None = None
    eval_samples: int | None = None
    eval_s: float | None = None  # the final evaluation's seconds
    #: every evaluation point's seconds (evaluation, measurements, divergence check), the final one's included:
    #: all outside the training clock (train_s and both throughput figures leave them out)
    eval_total_s: float | None = None
    #: seconds compiling the training step before the first step whose time counts (outside the training clock:
    #: not in train_s, the curve or the throughput); None where the framework compiles nothing up front
    compile_s: float | None = None
    #: the persistent compilation cache: "cold" (something was compiled afresh), "warm" (every compilation came
    #: from the cache), "off" (no cache: ``compile_cache = false``, or the framework did not use it); None: no
    #: compilation up front
    compile_cache: str | None = None
    #: seconds a fresh process without the cache would compile: compile_s where cold, compile_s plus the compile
    #: time the cache saved (the framework's own record of it) where warm: the start-up the user pays
    compile_cold_s: float | None = None
    #: a max-batch probe's framework estimate (issue 41; TrialSpec.estimate_batches), or why there is none; None
    #: where none was asked for. Stored as JSON in the trials column ``step_estimate_json`` (its ``column``)
    step_estimate: StepEstimate | None = field(default=None, metadata={"column": "step_estimate_json"})
    #: a batch-size schedule's trial (issue 52): its figures per stretch at one size (:class:`ScheduleStretch`), in
    #: training order; None for a constant size. Stored as one JSON list in the trials column ``schedule_json``
    schedule: tuple[ScheduleStretch, ...] | None = field(default=None, metadata={"column": "schedule_json"})

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the protocol message (the estimate and the schedule's stretches as their own plain data)."""
        out = asdict(self)
        out["step_estimate"] = self.step_estimate.to_dict() if self.step_estimate is not None else None
        out["schedule"] = None if self.schedule is None else [s.to_dict() for s in self.schedule]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerMetrics:
        """From a protocol message; keys this version does not know (a newer worker) are dropped. An estimate that
        cannot be read is kept as one whose error says so (it is advice: the probe's figures stand); a schedule's
        stretches that cannot be read are a ValueError (a malformed message)."""
        known = known_fields(cls, data)
        estimate = known.get("step_estimate")
        if estimate is not None and not isinstance(estimate, StepEstimate):
            try:
                known["step_estimate"] = StepEstimate.from_dict(estimate)
            except ValueError as e:
                known["step_estimate"] = StepEstimate(error=str(e)[:500])
        if known.get("schedule") is not None:
            known["schedule"] = schedule_from_data(known["schedule"])  # ValueError: a malformed message
        return cls(**known)


@dataclass(frozen=True)
class CurvePoint:
    """One evaluation on the held-out split during or at the end of a trial's training (a learning curve point).

    ``point`` counts the evaluations from 0 in training order (the last is the end of training); ``step`` the
    optimizer updates done before it; ``epoch`` = ``samples_seen`` / the training samples; ``train_s`` the training
    wall seconds so far (steps and batch preparation since the first step; every evaluation's time left out);
    ``eval_s`` what this evaluation took. The store writes one ``curve`` row per point.
    """

    point: int
    step: int
    samples_seen: int
    epoch: float
    train_s: float
    accuracy: float | None
    eval_loss: float | None
    eval_samples: int
    eval_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the protocol's ``result.curve`` items, the store's row)."""
        return asdict(self)


@dataclass(frozen=True)
class Placement:
    """Where a trial ran: one trials column per field (harness/store/db.py derives them, as from WorkerMetrics).

    ``host`` the node's host name, ``node_id`` Ray's node id (None on the local executor), ``device_index`` the
    GPU the trial had (its index on that node, None on CPU), ``concurrent_n`` how many trials the executor let run
    on that node at once (1: the trial had the node, or its GPU, to itself), ``attempt`` 1, or 2 for the re-run of
    a trial whose node died.
    """

    host: str | None = None
    node_id: str | None = None
    device_index: int | None = None
    concurrent_n: int | None = None
    attempt: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data."""
        return asdict(self)


@dataclass
class TrialOutcome:
    """What happened in one trial."""

    trial: TrialSpec
    status: Status
    reason: str = ""
    metrics: WorkerMetrics | None = None  # None when the worker sent no result (failures)
    step_times_ms: list[float] = field(default_factory=list)
    phase_steps: dict[str, int] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    param_count: int | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    exit_code: int | None = None
    stderr_tail: str = ""
    traceback: str = ""
    elapsed_s: float = 0.0
    started_at: str = ""
    finished_at: str = ""
    monitor: MonitorResult = field(default_factory=MonitorResult)
    curve: list[CurvePoint] = field(default_factory=list)  # one point per evaluation, in training order
    #: the gradient-noise measurement of each evaluation point (harness.noise.NoiseRecord), where it was asked for
    gradient_noise: list[NoiseRecord] = field(default_factory=list)
    placement: Placement = field(default_factory=Placement)  # where it ran (host, node, GPU, concurrency, attempt)
    python: str = ""  # the interpreter the worker ran in (what it reported; the unit's where it reported nothing)
    environment: str = ""  # its environment (TrialUnit.environment)


def _column(name: str, default: Any = None, *, json: bool = False) -> Any:
    """A field of a max-batch record part, stored in the ``maxbatch`` column ``name`` (its flat name before issue 39);
    ``json``: the column holds the field as JSON text (the store alone writes and reads it:
    :mod:`harness.store.maxbatch_row`)."""
    meta = {"column": name, "json": json}
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ProbeResult:
    """One probe as the search sees it (and as a max-batch answer keeps it). ``peak_mib`` is in the units the budget is
    counted in; ``growth_mib`` is what grows with the batch where the framework reports it apart (its allocated peak on
    a GPU), else None."""

    batch: int
    status: str  # ok / oom / crashed / error / timeout
    peak_mib: float | None = None
    reason: str = ""
    elapsed_s: float = 0.0
    stage: str = ""  # fit / predict / up / model / close / bisect / double / confirm / retry
    confirm: bool = False
    growth_mib: float | None = None
    #: the framework's own estimate of a training step's peak, (batch, MiB) per size it was asked at (issue 41), in the
    #: probe that asked for it (the search's first); ``estimate_note``: why there is none where one was asked for
    estimate_mib: tuple[tuple[int, float], ...] = ()
    estimate_note: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        """From plain data (``asdict`` of one, as stored): the estimate's pairs as tuples, unknown keys dropped."""
        known = known_fields(cls, data)
        known["estimate_mib"] = tuple((int(b), float(m)) for b, m in known.get("estimate_mib") or ())
        return cls(**known)


@dataclass(frozen=True)
class SearchAnswer:
    """What the search found: the largest size that fits (with accumulation the micro-batch, ``effective_batch`` what
    one update trains), the smallest that failed, and where and why the search stopped.

    ``capped``: it stopped at ``--max-batch-cap``, not at a failure (None in a row stored before the column).
    ``peak_mib`` and ``samples_per_s``: the largest peak and the step throughput measured at the answer.
    ``resolution``: the search's resolution label ("exact", "1%", "8,1%"; None in rows stored before issue 31: exact),
    ``spread_mib`` how far fresh processes' peaks moved where the search saw it, ``resolution_note`` why it stopped
    where its resolution alone would not have, or that the cap was moved onto the resolution's grid (issue 43)."""

    max_batch: int = _column("max_batch", 0)
    effective_batch: int | None = _column("effective_batch")
    capped: bool | None = _column("capped")
    fail_batch: int | None = _column("first_fail_batch")
    fail_status: str | None = _column("first_fail_status")
    fail_reason: str | None = _column("first_fail_reason")
    peak_mib: float | None = _column("answer_peak_mib")
    samples_per_s: float | None = _column("answer_samples_per_s")
    resolution: str | None = _column("resolution")
    resolution_note: str | None = _column("resolution_note")
    spread_mib: float | None = _column("spread_mib")


@dataclass(frozen=True)
class RecommendedBatch:
    """The size to train with: the answer less the margin (:class:`StoredMargin`), at or below it a power of two and a
    multiple of 8, and the allocator settings the probes ran with, which the user must train with for it to hold
    (issue 18; None in a row stored before: not recorded, {} none)."""

    batch: int | None = _column("recommended_batch")
    pow2: int | None = _column("recommended_pow2")
    mult8: int | None = _column("recommended_mult8")
    train_env: dict[str, str] | None = _column("train_env_json", json=True)


@dataclass(frozen=True)
class StoredMargin:
    """The memory the recommendation leaves unused at the boundary and what it is made of (issue 18; issue 22: the
    heap allowance under glibc's default malloc): ``user_mib`` (``--margin-mib``) + jitter + growth + heap =
    ``total_mib``. ``total_mib`` None: a row from before issue 18, where only the user's margin was left."""

    user_mib: float | None = _column("margin_mib")
    jitter_mib: float | None = _column("margin_jitter_mib")
    growth_mib: float | None = _column("margin_growth_mib")
    heap_mib: float | None = _column("margin_heap_mib")
    total_mib: float | None = _column("margin_total_mib")


@dataclass(frozen=True)
class MemoryLine:
    """The memory line ``a_mib + b_mib_per_sample x batch`` the search fitted to its probes, or where ``source`` is
    "estimate" the framework's estimated slope through the largest size that fitted (None: measured)."""

    a_mib: float | None = _column("fit_a_mib")
    b_mib_per_sample: float | None = _column("fit_b_mib_per_sample")
    source: str | None = _column("fit_source")


@dataclass(frozen=True)
class StoredFormula:
    """The seed's rule of thumb beside the measured answer: (budget - model state) / per-sample size, a power of two,
    with the measured per-sample size (``per_sample_mib``: the line's slope, else the analytic size) and with the
    analytic one (every layer's output and its gradient, fp32; None for a native model, which has no description);
    each one's error in % of the measured answer."""

    batch: int | None = _column("formula_batch")
    error_pct: float | None = _column("formula_error_pct")
    param_count: int | None = _column("param_count")
    model_state_mib: float | None = _column("model_state_mib")
    per_sample_mib: float | None = _column("per_sample_activation_mib")
    analytic_batch: int | None = _column("formula_analytic_batch")
    analytic_error_pct: float | None = _column("formula_analytic_error_pct")
    analytic_mib_per_sample: float | None = _column("analytic_activation_mib_per_sample")


@dataclass(frozen=True)
class StoredEstimate:
    """Issue 41: the framework's own estimate of a training step's peak (PyTorch's MemTracker under FakeTensorMode,
    JAX's compiled memory_analysis), asked for in the first probe's worker: its MiB per sample and its
    batch-independent part, what the first probe measured beyond it (``fixed_cost_mib``: the runtime, the libraries,
    the allocator's pools), the boundary predicted from both before any probe near it (``batch``) and that
    prediction's error in % of the measured answer; ``note`` says where it came from and what became of it, or why
    there was none (TensorFlow and MXNet offer none)."""

    batch: int | None = _column("estimate_batch")
    error_pct: float | None = _column("estimate_error_pct")
    mib_per_sample: float | None = _column("estimate_mib_per_sample")
    step_fixed_mib: float | None = _column("estimate_step_fixed_mib")
    fixed_cost_mib: float | None = _column("estimate_fixed_cost_mib")
    note: str | None = _column("estimate_note")


@dataclass(frozen=True)
class ProbeLog:
    """How the answer was found: every probe (``items``, in the order they ran; () in a row without them), their
    count and the search's wall time, the confirm run's length, and the most a probe's worker held on the GPU outside
    its framework's allocator (the CUDA context; None where none measured it)."""

    n: int | None = _column("probes_n")
    wall_s: float | None = _column("wall_s")
    confirm_steps: int | None = _column("confirm_steps")
    cuda_context_mib: float | None = _column("cuda_context_mib")
    items: tuple[ProbeResult, ...] = _column("probes_json", (), json=True)


@dataclass(frozen=True)
class SettleRun:
    """One heap-settling run (harness.maxbatch.probes.settle_heap): its size, its number at that size, how it ended;
    a last entry of batch 0 and run -1 says that nothing settled (its status: advice.NONE_SETTLED or NOT_SETTLED)."""

    batch: int
    run: int
    status: str


@dataclass(frozen=True)
class HeapSettling:
    """Issue 22: the runs that settled the recommendation under glibc's default malloc (the last candidate's last; ()
    where none ran) and their length in timed steps."""

    steps: int | None = _column("heap_settle_steps")
    runs: tuple[SettleRun, ...] = _column("heap_settle_json", (), json=True)

    @property
    def settled_batch(self) -> int:
        """The size the settling ended at (0: none settled or none ran)."""
        return self.runs[-1].batch if self.runs else 0


@dataclass(frozen=True)
class Verification:
    """The ``--verify`` run of the recommendation (issue 18): its timed steps, ``pass`` or ``fail`` (None: not
    verified), why it failed, and its peak where it passed."""

    steps: int | None = _column("verify_steps")
    status: str | None = _column("verify_status")
    reason: str | None = _column("verify_reason")
    peak_mib: float | None = _column("verify_peak_mib")

    @property
    def failed(self) -> bool:
        """A ``--verify`` run of the recommendation that did not complete."""
        return self.status == "fail"


#: the parts of a max-batch answer, by the name of the :class:`MaxBatchResult` field that holds each
MAXBATCH_PARTS: dict[str, type] = {}


@dataclass(frozen=True)
class MaxBatchResult:
    """One max-batch search's answer and how it was found, in typed parts (issue 39).

    The search's own names are fields (what was searched, where, under which budget and setting, when); the rest are
    parts a reader looks for: the ``answer``, the ``recommendation``, the ``margin`` it leaves, the measured memory
    ``line``, the seed's ``formula``, the framework's ``estimate``, the ``probes``, the heap ``settling`` and the
    ``verification``. Made by the search (:func:`harness.maxbatch.answer.answer_record`, then the settling and verifying
    runs with :func:`dataclasses.replace`), written and read back by the store alone, which flattens it to the
    ``maxbatch`` table's columns (:mod:`harness.store.maxbatch_row`: one column per field of the record and of its
    parts, named by its ``column`` metadata, the JSON ones (de)serialised there). A field that may be None is one a
    row stored before its column existed (or a search that did not measure it) leaves NULL; the search's names
    (framework, strategy, budget kind) and its answer (max_batch) are always written, and read back as "" and 0 from
    a row made by hand without them, never a number that was not measured.
    """

    run_id: int | None = _column("run_id")
    experiment: str | None = _column("experiment")
    framework: str = _column("framework", "")
    model: str | None = _column("model")
    dataset: str | None = _column("dataset")
    device: str | None = _column("device")
    precision: str | None = _column("precision")
    #: issue 29: the math mode the probes ran under (ieee | tf32 | framework-default)
    math_mode: str | None = _column("math_mode")
    strategy: str = _column("strategy", "")
    budget_mib: float | None = _column("budget_mib")
    budget_kind: str = _column("budget_kind", "")
    #: issue 14, item 5 ("what helps"): the setting the search ran with ("plain": fp32, no accumulation, the adapter's
    #: defaults), its micro-batches per update and adapter settings
    setting: str | None = _column("setting")
    accumulate_steps: int | None = _column("accumulate_steps")
    adapter_options: dict[str, Any] | None = _column("adapter_options_json", json=True)
    finished_at: str | None = _column("finished_at")
    #: the machine the search ran on (harness.monitor.environment.capture) and the versions the probes' worker imported
    env: dict[str, Any] | None = _column("env_json", json=True)
    versions: dict[str, Any] | None = _column("versions_json", json=True)
    answer: SearchAnswer = field(default_factory=SearchAnswer)
    recommendation: RecommendedBatch = field(default_factory=RecommendedBatch)
    margin: StoredMargin = field(default_factory=StoredMargin)
    line: MemoryLine = field(default_factory=MemoryLine)
    formula: StoredFormula = field(default_factory=StoredFormula)
    estimate: StoredEstimate = field(default_factory=StoredEstimate)
    probes: ProbeLog = field(default_factory=ProbeLog)
    settling: HeapSettling = field(default_factory=HeapSettling)
    verification: Verification = field(default_factory=Verification)

    @property
    def verify_failed(self) -> bool:
        """A ``--verify`` run of the recommendation that did not complete."""
        return self.verification.failed



def maxbatch_fields(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """(field, column, JSON?) of each stored field of a :class:`MaxBatchResult` part (or of the record's own)."""
    return tuple((f.name, f.metadata["column"], bool(f.metadata["json"]))
                 for f in fields(cls) if "column" in f.metadata)


MAXBATCH_PARTS.update({f.name: f.type if isinstance(f.type, type) else globals()[str(f.type)]
                       for f in fields(MaxBatchResult) if "column" not in f.metadata})
