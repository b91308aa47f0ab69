"""Framework-free parts of the JAX adapter (:mod:`adapters.jax.adapter`): layer functions chained into one (how the
model is built from the description's layers). JAX is never imported here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A layer function: (its parameters, its state, input, training?) -> (output, new state).
LayerFn = Callable[[list[Any], list[Any], Any, bool], tuple[Any, list[Any]]]


def chain(layers: list[tuple[LayerFn, int, int]]) -> tuple[LayerFn, int, int]:
    """Layers applied in order as one layer function: each takes its slice of the parameters and state."""
    n_params, n_state = sum(n for _, n, _ in layers), sum(n for _, _, n in layers)

    def chained(params: list[Any], state: list[Any], x: Any, train: bool) -> tuple[Any, list[Any]]:
        new_state: list[Any] = []
        pi = si = 0
        for fn, np_, ns in layers:
            x, s = fn(params[pi : pi + np_], state[si : si + ns], x, train)
            new_state += s
            pi, si = pi + np_, si + ns
        return x, new_state  # no layers: the input itself (a residual block's identity shortcut)

    return chained, n_params, n_state
