"""The JAX adapter without its ``jax.block_until_ready``: the step returns as soon as XLA has its work.

On a CPU this is invisible to timing: the step reassigns the parameters it donated, and dropping the last
reference to a donated buffer waits for the computation using it, so a step that succeeds has finished when
it returns. A step that fails has not: its error waits in the new arrays until something reads them
(measured: an out-of-memory step returned in 3 ms, and the error surfaced at the next read). Only the
failing-step check sees it.
"""

from __future__ import annotations

from typing import Any

from adapters.jax import JAXAdapter


class JAXNoSync(JAXAdapter):
    def train_step(self, batch: Any) -> None:
        x, y = batch
        step = self._compiled[int(x.shape[0])]  # compiled in prepare_batch
        self.params, self.state, self.opt_state, _ = step(self.params, self.state, self.opt_state, x, y)
        # the defect: no self.jax.block_until_ready((self.params, self.state, self.opt_state, loss))
