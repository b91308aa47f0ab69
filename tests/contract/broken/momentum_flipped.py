"""BatchNorm's momentum passed through unchanged: PyTorch's momentum is the weight of the *new* statistic."""

from __future__ import annotations

from adapters.base import LayerSite, WeightFeed
from adapters.pytorch import PyTorchAdapter
from harness.models import BatchNorm


class MomentumFlipped(PyTorchAdapter):
    def layer_batchnorm(self, layer: BatchNorm, site: LayerSite, weights: WeightFeed) -> None:
        bn = self.torch.nn.BatchNorm2d(site.in_shape[0], eps=layer.eps, momentum=layer.momentum)  # defect
        gamma, beta = weights.take(2)
        self._params += [(bn.weight, gamma), (bn.bias, beta)]
        self._modules.append(bn)
        self._bn.append(bn)
