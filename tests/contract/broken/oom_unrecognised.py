"""is_oom() knows only Python's MemoryError, not the framework's own out-of-memory errors."""

from __future__ import annotations

from adapters.pytorch import PyTorchAdapter


class OOMUnrecognised(PyTorchAdapter):
    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError)  # defect
