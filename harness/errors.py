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


class SearchAborted(BatchscopeError):
    """A max-batch probe failed repeatedly for a reason other than memory; the boundary is unknown."""

    def __init__(self, message: str, probes: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.probes = probes
