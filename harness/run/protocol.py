"""The worker protocol: the parent's typed request, and typed messages from the worker on a dedicated pipe.

The parent sends one :class:`WorkerRequest` (JSON) on the worker's stdin. The worker answers on a pipe file
descriptor of its own (not stdout, which frameworks litter with logs), one JSON object per line. Every line
carries ``event``, ``v`` (:data:`PROTOCOL_VERSION`) and ``t`` (``time.monotonic()``, a clock the two processes
share on Linux). Both ends check the version: a worker that imports another batchscope than its parent (an
``[adapters.NAME] python`` with its own install, a cluster node with another release) is refused with both
versions named (:class:`ProtocolMismatchError`), never read field by field as if it spoke ours.

Messages, in the order a good trial sends them::

    phase    {phase}                          phase in PHASES; one phase runs until the next starts
    hello    {pid, adapter, versions, python, executable}
    ready    {device: {...}, param_count, model}   after setup
    progress {phase, step, steps_total, epoch, epochs, step_ms}   during training, at most every
                                              ``progress_interval_s`` (the request's; None: never)
    result   {metrics: {...}, step_times_ms: [...], phase_steps: {...}, curve: [{...}], diverged,
              gradient_noise: [{...}]}
    failure  {oom: bool, error_type, message, traceback, phase}
    end      {}

:func:`decode` turns a line into one of the message records below (a :class:`Message`); the executor hands
each on to its listeners as plain data (:meth:`Message.to_dict`), the form the live display reads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

from adapters.records import SetupFacts
from harness.config.trial import TrialSpec
from harness.data import PreparedData
from harness.errors import ProtocolMismatchError, WorkerProtocolError
from harness.noise import NoiseRecord
from harness.records import PROGRESS_INTERVAL_S, CurvePoint, WorkerMetrics

__all__ = ["EVENTS", "PHASES", "PROGRESS_INTERVAL_S", "PROTOCOL_VERSION", "Channel", "End", "Failure", "Hello",
           "Message", "Phase", "Progress", "ProgressTicker", "Ready", "Result", "SetupFacts", "WorkerReport",
           "WorkerRequest", "decode", "encode"]

#: 2: typed messages, each line carries the version (1 sent it in the request only, and no one checked it);
#: 3: ``result`` carries the learning curve and whether (and where) the training diverged;
#: 4: ``result`` carries the gradient-noise measurement of each evaluation point (``gradient_noise``);
#: 5: the ``steady`` and ``finish`` phases after the final evaluation, ``phase_steps["steady"]`` (issue 29); the
#:    request's trial carries ``math_mode``, which the worker applies (an older worker would ignore it), and
#:    ``ready``'s device facts the math mode the framework read back (``math_mode``);
#:    and ``result``'s metrics carry ``cuda_context_mib`` (what the worker held on the GPU outside its allocator)
#: 6: ``result``'s metrics carry ``compile_s``, ``compile_cache`` and ``compile_cold_s`` (issue 31)
#: 7: the request's trial carries ``stop_at_accuracy`` and ``eval_every_steps`` (train to the target, issue 33),
#:    which an older worker would ignore, and ``result``'s metrics ``target_outcome``
#: 8: the request's trial carries ``estimate_batches`` (a max-batch probe asks the adapter for its step-memory
#:    estimate after its own figures, in the ``finish`` phase; issue 41), and ``result``'s metrics
#:    ``step_estimate_json``
#: 9: ``result``'s metrics carry ``step_estimate`` as an object (``harness.records.StepEstimate.to_dict``), not
#:    ``step_estimate_json`` text (issue 51, item 3)
#: 10: ``result``'s metrics carry a schedule's ``schedule`` as a list of objects (``harness.records.ScheduleStretch``),
#:     not ``schedule_json`` text, and a noise item its ``groups`` as a list of pairs, not ``groups_json`` text
#: 11: the request's trial places every evaluation point by samples (``eval_by``; harness.config.schedule.eval_steps):
#:     a constant size's ``eval_points`` at sample counts, and to the target at each ``eval_every_samples`` samples,
#:     which a worker of 10 read for a schedule only (it would have evaluated a constant size nowhere on the way)
PROTOCOL_VERSION = 11
PHASES = ("setup", "warmup", "timed", "train", "eval", "steady", "finish")


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: send them as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """A message field as plain data: records by their ``to_dict``, sequences of them item by item."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _check_version(version: Any, what: str) -> None:
    if version != PROTOCOL_VERSION:
        raise ProtocolMismatchError(
            f"{what} speaks worker protocol version {version!r}, this batchscope speaks {PROTOCOL_VERSION}: the "
            "worker's interpreter imports another batchscope than the parent's; install the same release there "
            "(check [adapters.NAME] python in the experiment file, or the cluster nodes' environments)")


# ------------------------------------------------------------------------------------------------ parent -> worker
@dataclass(frozen=True)
class WorkerRequest:
    """Everything a worker needs to run one trial, sent once on its stdin.

    ``model`` is the model description as data (:meth:`harness.models.ModelDescription.to_spec`), resolved in
    the parent so that a user's model function is never imported by a worker; None for a framework's native
    model. ``os_memory_limit_mib``: RLIMIT_DATA the worker puts on itself (max-batch probes on CPU).
    """

    trial: TrialSpec
    data: PreparedData
    order_path: str
    adapter_target: str  # "module:Class" of the adapter
    model: Mapping[str, Any] | None = None
    os_memory_limit_mib: float | None = None
    progress_interval_s: float | None = PROGRESS_INTERVAL_S
    protocol: int = PROTOCOL_VERSION

    def to_json(self) -> str:
        """The request as one JSON document."""
        return json.dumps({"protocol": self.protocol, "trial": self.trial.to_dict(), "data": self.data.to_dict(),
                           "order_path": self.order_path, "adapter_target": self.adapter_target,
                           "model": self.model, "os_memory_limit_mib": self.os_memory_limit_mib,
                           "progress_interval_s": self.progress_interval_s})

    @classmethod
    def from_json(cls, text: str) -> WorkerRequest:
        """Parse a request; a request of another protocol version is refused before any field is read.

        Raises:
            ProtocolMismatchError: the parent speaks another version.
            WorkerProtocolError: not a request at all.
        """
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkerProtocolError(f"the worker's request is not JSON: {text[:200]!r}") from e
        if not isinstance(raw, dict):
            raise WorkerProtocolError(f"the worker's request is not an object: {text[:200]!r}")
        _check_version(raw.get("protocol"), "the parent")
        try:
            return cls(trial=TrialSpec.from_dict(raw["trial"]), data=PreparedData.from_dict(raw["data"]),
                       order_path=str(raw["order_path"]), adapter_target=str(raw["adapter_target"]),
                       model=raw.get("model"), os_memory_limit_mib=raw.get("os_memory_limit_mib"),
                       progress_interval_s=raw.get("progress_interval_s"), protocol=raw["protocol"])
        except (KeyError, TypeError, ValueError) as e:
            raise WorkerProtocolError(f"the worker's request lacks or garbles {e}") from e


# ------------------------------------------------------------------------------------------------ worker -> parent
@dataclass(frozen=True)
class Message:
    """One protocol line's record; subclasses name their ``event`` and add their fields."""

    event: ClassVar[str] = ""
    t: float = field(default_factory=time.monotonic, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``event``, ``t`` and the fields (as on the wire, without the version)."""
        out = {"event": self.event, "t": self.t}
        for f in dataclasses.fields(self):
            if f.name != "t":
                out[f.name] = _plain(getattr(self, f.name))
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Message:
        """From :meth:`to_dict`'s form (the ``event`` and ``v`` keys are the decoder's)."""
        return cls(**{k: v for k, v in raw.items() if k not in ("event", "v")})


@dataclass(frozen=True)
class Phase(Message):
    """The worker began ``phase`` (one of :data:`PHASES`) at ``t``."""

    event: ClassVar[str] = "phase"
    phase: str

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise WorkerProtocolError(f"unknown phase {self.phase!r}; phases: {', '.join(PHASES)}")


@dataclass(frozen=True)
class Hello(Message):
    """The worker's process and the adapter it loaded."""

    event: ClassVar[str] = "hello"
    pid: int
    adapter: str
    versions: Mapping[str, str]
    python: str
    executable: str


@dataclass(frozen=True)
class Ready(Message):
    """Setup is done: the device, the model's size as the framework counts it, the model as data."""

    event: ClassVar[str] = "ready"
    device: SetupFacts
    param_count: int | None
    model: Mapping[str, Any]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Ready:
        return cls(device=SetupFacts.from_dict(raw.get("device")), param_count=raw.get("param_count"),
                   model=raw.get("model") or {}, t=raw["t"])


@dataclass(frozen=True)
class Progress(Message):
    """Training progress: steps done of ``steps_total``, the epoch, the last step's time."""

    event: ClassVar[str] = "progress"
    phase: str
    step: int
    steps_total: int
    epoch: int
    epochs: int
    step_ms: float | None


@dataclass(frozen=True)
class Result(Message):
    """The trial ran to its end, or to where its training diverged (``diverged``: where and how; None when it
    did not): the worker's measurements, every step's time, the steps each phase ran, the learning curve."""

    event: ClassVar[str] = "result"
    metrics: WorkerMetrics
    step_times_ms: tuple[float, ...]
    phase_steps: Mapping[str, int]
    curve: tuple[CurvePoint, ...] = ()
    diverged: str | None = None
    gradient_noise: tuple[NoiseRecord, ...] = ()  # one per evaluation point where the trial measured it

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Result:
        return cls(metrics=WorkerMetrics.from_dict(dict(raw["metrics"])),
                   step_times_ms=tuple(raw["step_times_ms"]), phase_steps=dict(raw["phase_steps"]),
                   curve=tuple(CurvePoint(**p) for p in raw.get("curve", ())), diverged=raw.get("diverged"),
                   gradient_noise=tuple(NoiseRecord.from_dict(p) for p in raw.get("gradient_noise", ())), t=raw["t"])


@dataclass(frozen=True)
class Failure(Message):
    """The trial failed with an exception in ``phase``; ``oom`` as the adapter classified it."""

    event: ClassVar[str] = "failure"
    oom: bool
    error_type: str
    message: str
    traceback: str
    phase: str


@dataclass(frozen=True)
class End(Message):
    """The worker is done and about to exit."""

    event: ClassVar[str] = "end"


MESSAGES: dict[str, type[Message]] = {m.event: m for m in (Phase, Hello, Ready, Progress, Result, Failure, End)}
EVENTS = tuple(MESSAGES)


def encode(msg: Message) -> bytes:
    """One protocol line."""
    if type(msg).event not in MESSAGES:
        raise WorkerProtocolError(f"unknown event {type(msg).event!r}")
    body = {"event": msg.event, "v": PROTOCOL_VERSION, **msg.to_dict()}
    return (json.dumps(_clean(body), separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> Message:
    """Parse one protocol line into its record.

    Raises:
        ProtocolMismatchError: the line is of another protocol version (checked before anything else).
        WorkerProtocolError: anything else that is not a message of this version.
    """
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise WorkerProtocolError(f"not a protocol line: {line[:200]!r}") from e
    match raw:
        case {"event": str(event), "t": int() | float()}:
            pass
        case _:
            raise WorkerProtocolError(f"not a protocol message: {str(raw)[:200]}")
    _check_version(raw.get("v"), "the worker")  # before the event: another version may have other events
    kind = MESSAGES.get(event)
    if kind is None:
        raise WorkerProtocolError(f"unknown event {event!r}: {str(raw)[:200]}")
    try:
        return kind.from_dict(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise WorkerProtocolError(f"a {event} message with missing or unknown fields ({e}): "
                                  f"{str(raw)[:200]}") from e


class ProgressTicker:
    """Sends ``progress`` messages at most every ``interval_s``; the check per step is one comparison.

    Called between steps, after the step's clock has been read, so it is never inside a timed step.
    ``interval_s`` None sends nothing (the benchmark's "without progress" side); 0 sends after every step.
    """

    def __init__(self, chan: Channel, interval_s: float | None, steps_total: int, steps_per_epoch: int,
                 epochs: int) -> None:
        self.chan, self.interval_s = chan, interval_s
        self.steps_total, self.steps_per_epoch, self.epochs = steps_total, max(steps_per_epoch, 1), epochs
        self._next_s = 0.0  # perf_counter seconds: the first step reports at once
        self.sent = 0

    def tick(self, now_s: float, step: int, phase: str, step_ms: float) -> None:
        """Step ``step`` (0-based) ended at ``now_s`` (``time.perf_counter()``) after ``step_ms``."""
        done = step + 1
        # the last step always reports, so a display never stops short of 100% before evaluation
        if self.interval_s is None or (now_s < self._next_s and done != self.steps_total):
            return
        self._next_s = now_s + self.interval_s
        self.chan.send(Progress(phase=phase, step=done, steps_total=self.steps_total,
                                epoch=min(step // self.steps_per_epoch + 1, self.epochs) if self.epochs else 0,
                                epochs=self.epochs, step_ms=step_ms))
        self.sent += 1


class Channel:
    """The worker's end: writes protocol lines, unbuffered, to a file descriptor."""

    def __init__(self, fd: int) -> None:
        self._f: IO[bytes] = os.fdopen(fd, "wb", buffering=0)

    def send(self, msg: Message) -> None:
        """Send one message."""
        self._f.write(encode(msg))

    def close(self) -> None:
        """Close the pipe (the parent then sees end of file)."""
        self._f.close()


@dataclass
class WorkerReport:
    """Everything the parent collected from one worker's messages."""

    hello: Hello | None = None
    ready: Ready | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)  # (phase, monotonic start)
    result: Result | None = None
    failure: Failure | None = None
    ended: bool = False
    progress: Progress | None = None  # the latest progress message
    bad_lines: list[str] = field(default_factory=list)
    #: why the worker's messages could not be read at all (another protocol version); the trial is an error
    mismatch: str | None = None

    def feed(self, msg: Message) -> None:
        """Record one decoded message."""
        if isinstance(msg, Hello):
            self.hello = msg
        elif isinstance(msg, Ready):
            self.ready = msg
        elif isinstance(msg, Phase):
            self.phases.append((msg.phase, msg.t))
        elif isinstance(msg, Progress):
            self.progress = msg
        elif isinstance(msg, Result):
            self.result = msg
        elif isinstance(msg, Failure):
            self.failure = msg
        elif isinstance(msg, End):
            self.ended = True

    @property
    def current_phase(self) -> str | None:
        """The phase the worker announced last."""
        return self.phases[-1][0] if self.phases else None
