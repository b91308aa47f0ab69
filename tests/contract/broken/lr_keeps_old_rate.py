"""A learning-rate change whose momentum keeps the old rate, as Keras' and MXNet's own velocity (``v = m v - lr g``)
does when only the rate is set: PyTorch's buffer is scaled by old/new, so that ``lr_new * b`` is the old velocity."""

from __future__ import annotations

from adapters.pytorch import PyTorchAdapter


class LrKeepsOldRate(PyTorchAdapter):
    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            old, group["lr"] = group["lr"], lr
            for param in group["params"]:
                buf = self.optimizer.state.get(param, {}).get("momentum_buffer")
                if buf is not None:
                    buf.mul_(old / lr)  # defect: the velocity lr * b stays the old one
