"""The framework imported at module level: listing adapters in the parent would load PyTorch."""

from __future__ import annotations

import torch  # noqa: F401 - the defect: the parent imports this module to list adapters

from adapters.pytorch import PyTorchAdapter


class TopLevelImport(PyTorchAdapter):
    pass
