"""SGD with momentum and Adam for the JAX adapter, written out so they match the reference update exactly.

JAX has no optimizers of its own (optax is a separate package, and not needed for two formulas). Both
follow PyTorch, the contract suite's reference: SGD momentum ``b = m*b + g; w -= lr*b`` (Keras' and
MXNet's ``v = m*v - lr*g; w += v`` is the same for a constant learning rate, and after a rate change because
their adapters rescale ``v`` by new/old there; here the kept buffer meets the new rate whole), and Adam with the bias
corrections applied to the moments and ``eps`` added to the corrected second moment's square root.
Each returns ``(init, update)``: ``init(params) -> state`` and
``update(params, grads, state) -> (params, state)``, pure functions of lists of arrays, traced inside
the jitted step. ``jax`` is passed in, never imported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.base import OptimizerSpec

Optimizer = tuple[Callable[[list[Any]], Any], Callable[[list[Any], list[Any], Any], tuple[list[Any], Any]]]


def sgd_momentum(jax: Any, spec: OptimizerSpec) -> Optimizer:
    """PyTorch's SGD with momentum (no dampening, no Nesterov, no weight decay)."""
    jnp = jax.numpy
    lr, m = spec.lr, spec.momentum

    def init(params: list[Any]) -> list[Any]:
        return [jnp.zeros_like(p) for p in params]

    def update(params: list[Any], grads: list[Any], bufs: list[Any]) -> tuple[list[Any], list[Any]]:
        # PyTorch's first step sets the buffer to the gradient itself; m*0 + g is the same thing.
        new_bufs = [m * b + g for b, g in zip(bufs, grads, strict=True)] if m else list(grads)
        return [p - lr * b for p, b in zip(params, new_bufs, strict=True)], (new_bufs if m else bufs)

    return init, update


def adam(jax: Any, spec: OptimizerSpec) -> Optimizer:
    """PyTorch's Adam (not AdamW): bias-corrected moments, eps outside the square root."""
    jnp = jax.numpy
    lr, (b1, b2), eps = spec.lr, spec.adam_betas, spec.adam_eps

    def init(params: list[Any]) -> tuple[Any, list[Any], list[Any]]:
        return jnp.zeros((), jnp.float32), [jnp.zeros_like(p) for p in params], [jnp.zeros_like(p) for p in params]

    def update(params: list[Any], grads: list[Any], state: Any) -> tuple[list[Any], Any]:
        t, ms, vs = state
        t = t + 1
        ms = [b1 * mo + (1 - b1) * g for mo, g in zip(ms, grads, strict=True)]
        vs = [b2 * v + (1 - b2) * g * g for v, g in zip(vs, grads, strict=True)]
        c1, c2 = 1 - b1**t, 1 - b2**t
        new = [p - lr * (mo / c1) / (jnp.sqrt(v / c2) + eps) for p, mo, v in zip(params, ms, vs, strict=True)]
        return new, (t, ms, vs)

    return init, update
