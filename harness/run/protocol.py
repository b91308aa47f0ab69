"""The worker protocol: JSON lines from the worker to the parent, on a dedicated pipe.

The parent sends one request (JSON) on the worker's stdin. The worker answers on a pipe file
descriptor of its own (not stdout, which frameworks litter with logs), one JSON object per line.
Every message has ``event`` and ``t`` (``time.monotonic()``, a clock the two processes share on Linux).

Events, in the order a good trial sends them::

    hello    {pid, adapter, versions}
    phase    {phase}                          phase in PHASES; one phase runs until the next starts
    ready    {device: {...}, param_count}     after setup
    progress {phase, step, steps_total, epoch, epochs, step_ms}   during training, at most every
                                              ``progress_interval_s`` (the request's; None: never)
    result   {metrics: {...}, step_times_ms: [...], phase_steps: {...}}
    failure  {oom: bool, error_type, message, traceback, phase}
    end      {}
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import IO, Any

from harness.errors import WorkerProtocolError
from harness.records import PROGRESS_INTERVAL_S

__all__ = ["PROGRESS_INTERVAL_S", "Channel", "ProgressTicker", "WorkerReport", "decode", "encode"]

PROTOCOL_VERSION = 1
PHASES = ("setup", "warmup", "timed", "train", "eval")
EVENTS = ("hello", "phase", "ready", "progress", "result", "failure", "end")


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: send them as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def encode(event: str, **fields: Any) -> bytes:
    """One protocol line."""
    if event not in EVENTS:
        raise WorkerProtocolError(f"unknown event {event!r}")
    msg = {"event": event, "t": time.monotonic(), **fields}
    return (json.dumps(_clean(msg), separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse one protocol line; raise :class:`WorkerProtocolError` on anything else."""
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        raise WorkerProtocolError(f"not a protocol line: {line[:200]!r}") from e
    if not isinstance(msg, dict) or msg.get("event") not in EVENTS or not isinstance(msg.get("t"), (int, float)):
        raise WorkerProtocolError(f"not a protocol message: {str(msg)[:200]}")
    if msg["event"] == "phase" and msg.get("phase") not in PHASES:
        raise WorkerProtocolError(f"unknown phase {msg.get('phase')!r}")
    return msg


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
        self.chan.send("progress", phase=phase, step=done, steps_total=self.steps_total,
                       epoch=min(step // self.steps_per_epoch + 1, self.epochs) if self.epochs else 0,
                       epochs=self.epochs, step_ms=step_ms)
        self.sent += 1


class Channel:
    """The worker's end: writes protocol lines, unbuffered, to a file descriptor."""

    def __init__(self, fd: int) -> None:
        self._f: IO[bytes] = os.fdopen(fd, "wb", buffering=0)

    def send(self, event: str, **fields: Any) -> None:
        """Send one message."""
        self._f.write(encode(event, **fields))

    def close(self) -> None:
        """Close the pipe (the parent then sees end of file)."""
        self._f.close()


@dataclass
class WorkerReport:
    """Everything the parent collected from one worker's messages."""

    hello: dict[str, Any] = field(default_factory=dict)
    ready: dict[str, Any] = field(default_factory=dict)
    phases: list[tuple[str, float]] = field(default_factory=list)  # (phase, monotonic start)
    result: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    ended: bool = False
    progress: dict[str, Any] | None = None  # the latest progress message
    bad_lines: list[str] = field(default_factory=list)

    def feed(self, msg: dict[str, Any]) -> None:
        """Record one decoded message."""
        event = msg["event"]
        if event == "hello":
            self.hello = msg
        elif event == "ready":
            self.ready = msg
        elif event == "phase":
            self.phases.append((msg["phase"], float(msg["t"])))
        elif event == "progress":
            self.progress = msg
        elif event == "result":
            self.result = msg
        elif event == "failure":
            self.failure = msg
        elif event == "end":
            self.ended = True

    @property
    def current_phase(self) -> str | None:
        """The phase the worker announced last."""
        return self.phases[-1][0] if self.phases else None
