"""What a max-batch search tells whoever watches it: one listener object with named methods and typed messages, as a
sweep's :class:`harness.run.listener.SweepListener` (issue 39).

:meth:`harness.maxbatch.searching.MaxBatchSearch.run` calls a :class:`MaxBatchListener`'s methods as the search goes
(every worker message of a probe, each probe's end, the bracket each probe leaves); every method here does nothing, so a
listener overrides only what it needs. The CLI's printer is one (``harness.cli.maxbatch``); a test that records what
happened is another. Light on purpose: the CLI subclasses it at import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from harness.config.trial import TrialSpec
    from harness.records import ProbeResult, TrialOutcome
    from harness.run.protocol import Message


@dataclass(frozen=True)
class Bracket:
    """The bracket a probe left: ``lo`` fits, ``hi`` fails (None: no failure yet), after ``probe``."""

    probe: ProbeResult
    lo: int
    hi: int | None


class MaxBatchListener:
    """Told what a max-batch search does, in order; override the methods you need (each is a no-op here). A context
    manager too: :meth:`~harness.maxbatch.searching.MaxBatchPlan.run_in` holds it open while its searches run (a live
    display starts and stops there)."""

    def __enter__(self) -> MaxBatchListener:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def on_search_start(self, i: int, n: int, label: str) -> None:
        """Search ``i`` (from 0) of ``n`` of a "what helps" run starts, under the setting ``label``."""

    def on_probe_message(self, trial: TrialSpec, msg: Message) -> None:
        """A message from the worker of a probe, a settling or a verify run (live progress: ``Phase``, ...)."""

    def on_probe_complete(self, outcome: TrialOutcome) -> None:
        """A probe, settling or verify run ended and its row is stored (a control run is not reported)."""

    def on_bracket(self, bracket: Bracket) -> None:
        """A probe of the search narrowed (or widened) the bracket."""
