"""One error hierarchy for batchscope. Every message says what to do next.

The CLI maps these to exit codes: :class:`ConfigError` and :class:`DataError` exit 2 (nothing is
written), :class:`DoesNotFitError` exits 3, anything else unexpected exits 1.
"""

from __future__ import annotations


class BatchscopeError(Exception):
    """Base class of every error batchscope raises on purpose."""

    exit_code = 1


class ConfigError(BatchscopeError):
    """A bad experiment file, option or setting. Nothing was run or written."""

    exit_code = 2


class DataError(BatchscopeError):
    """A data set cannot be had (no network and no local copy, bad checksum, truncated archive)."""

    exit_code = 2


class StoreError(BatchscopeError):
    """The results store is missing, from another schema, or would be overwritten."""

    exit_code = 2


class AdapterError(BatchscopeError):
    """An adapter cannot be loaded or its framework is not installed."""

    exit_code = 2


class DoesNotFitError(BatchscopeError):
    """The model does not fit the memory budget even at batch size 1."""

    exit_code = 3


class WorkerProtocolError(BatchscopeError):
    """A worker sent something that is not a protocol message."""


class ProtocolMismatchError(WorkerProtocolError):
    """The worker and its parent speak different versions of the worker protocol (two batchscope releases)."""


class ProbeError(BatchscopeError):
    """A probe could not take a reading (driver error, GPU lost): the sample records a gap with this
    message and sampling goes on."""


class ProbeUnsupportedError(ProbeError):
    """This device or driver cannot give this reading at all: its series is empty (NaN) for the whole
    trial, and the reason is recorded once."""


class WorkerGoneError(ProbeError):
    """The watched worker process has exited: sampling ends (cleanly, this is not a failure)."""


class PartialReadingError(ProbeError):
    """Some of a probe's readings failed: ``values`` holds what was read (the rest NaN), the message says
    why the rest is missing. The sample keeps the values and records the message as its gap reason."""

    def __init__(self, message: str, values: dict[str, float]) -> None:
        super().__init__(message)
        self.values = values


class SearchAborted(BatchscopeError):
    """A max-batch probe failed repeatedly for a reason other than memory; the boundary is unknown."""

    def __init__(self, message: str, probes: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.probes = probes


class OutputError(BatchscopeError):
    """An output path cannot be written (an existing file where a directory goes, a read-only or full
    file system, a directory deleted mid-run). Trials stored before it are kept."""

    exit_code = 2


class DiskFullError(OutputError):
    """A write refused for want of space (ENOSPC, a quota, SQLite's "database or disk is full"): the message names
    the path, the space left and what was kept (:mod:`harness.diskfull`). Exit 2, as any output path that cannot
    be written; what was finished before is kept."""


class BatchscopeWarning(UserWarning):
    """Something the user should know that changes nothing in what runs (a damaged cache copy prepared again):
    the command line prints it as ``batchscope: note: ...``; libraries never print."""


class Terminated(BaseException):
    """The process got SIGTERM or SIGHUP. A BaseException, like KeyboardInterrupt, so that no ``except
    Exception`` swallows it on the way out: every ``finally`` on the way kills the worker in flight.
    Exit code 128 + the signal number, as a shell reports a process killed by it (143, 129)."""

    def __init__(self, signum: int | str) -> None:
        import re
        import signal

        if isinstance(signum, str):  # rebuilt from its message by a library that annotates exceptions (reportlab's
            # annotateException calls type(e)(new message)): keep the signal its message names
            found = re.search(r"got (SIG[A-Z]+)", signum)
            signum = signal.Signals[found.group(1)] if found and found.group(1) in signal.Signals.__members__ \
                else signal.SIGTERM
        super().__init__(f"got {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.exit_code = 128 + int(signum)
