"""The worker protocol: JSON lines from the worker to the parent, on a dedicated pipe.

The parent sends one request (JSON) on the worker's stdin. The worker answers on a pipe file
descriptor of its own (not stdout, which frameworks litter with logs), one JSON object per line.
Every message has ``event`` and ``t`` (``time.monotonic()``, a clock the two processes share on Linux).

Events, in the order a good trial sends them::

    hello    {pid, adapter, versions}
    phase    {phase}                          phase in PHASES; one phase runs until the next starts
    ready    {device: {...}, param_count}     after setup
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

PROTOCOL_VERSION = 1
PHASES = ("setup", "warmup", "timed", "train", "eval")
EVENTS = ("hello", "phase", "ready", "result", "failure", "end")


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
