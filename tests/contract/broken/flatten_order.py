"""Flatten in (H, W, C) order, as an NHWC adapter that forgot to permute the Dense kernel's rows would."""

from __future__ import annotations

from adapters.base import LayerSite, WeightFeed
from adapters.pytorch import PyTorchAdapter
from harness.models import Flatten


class FlattenOrder(PyTorchAdapter):
    def layer_flatten(self, layer: Flatten, site: LayerSite, weights: WeightFeed) -> None:
        torch = self.torch

        class ChannelsLast(torch.nn.Module):  # type: ignore[misc, name-defined]
            def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[name-defined]
                return x.permute(0, 2, 3, 1) if x.dim() == 4 else x

        self._modules += [ChannelsLast(), torch.nn.Flatten()]  # defect: rows in (H, W, C) order
