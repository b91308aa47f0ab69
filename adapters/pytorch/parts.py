"""Framework-free parts of the PyTorch adapter (:mod:`adapters.pytorch.adapter`): the residual block's module class,
made on first use from the torch it is given (torch is never imported here)."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def residual_module(torch: Any) -> Any:
    """``body(x) + shortcut(x)`` as an ``nn.Module`` class (made on first use: torch is imported lazily)."""

    class ResidualBlock(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, body: Any, shortcut: Any) -> None:
            super().__init__()
            self.body, self.shortcut = body, shortcut

        def forward(self, x: Any) -> Any:
            return self.body(x) + self.shortcut(x)  # an empty Sequential returns its input: the identity

    return ResidualBlock
