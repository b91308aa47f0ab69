"""BatchNorm written by hand whose running variance takes the biased batch variance, while it declares unbiased."""

from __future__ import annotations

from typing import Any

from adapters.base import LayerSite, WeightFeed
from adapters.pytorch import PyTorchAdapter
from harness.models import BatchNorm


class BiasedVariance(PyTorchAdapter):
    bn_running_variance = "unbiased"  # what it claims; the defect is that it does otherwise

    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        torch = self.torch
        m, eps = layer.momentum, layer.eps

        class HandBN(torch.nn.BatchNorm2d):  # type: ignore[misc, name-defined]
            def forward(self, x: Any) -> Any:
                if not self.training:
                    return super().forward(x)
                mean, var = x.mean(dim=(0, 2, 3)), x.var(dim=(0, 2, 3), unbiased=False)
                with torch.no_grad():
                    self.running_mean.mul_(m).add_((1 - m) * mean)
                    self.running_var.mul_(m).add_((1 - m) * var)  # defect: no n / (n - 1)
                shape = (1, -1, 1, 1)
                return (x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps) * self.weight.view(
                    shape
                ) + self.bias.view(shape)

        bn = HandBN(site.in_shape[0], eps=eps, momentum=1 - m)
        gamma, beta = weights.take(2)
        self._params += [(bn.weight, gamma), (bn.bias, beta)]
        self._modules.append(bn)
        self._bn.append(bn)
