"""What a sweep tells whoever watches it: one listener object with named methods and typed messages.

The shape of Ray Tune's ``Callback``: :func:`harness.run.sweep.run_sweep` calls a :class:`SweepListener`'s methods
as the sweep goes (where each framework runs, the plan, each trial's start, every worker message, each trial's end);
every method here does nothing, so a listener overrides only what it needs. The CLI's live display is one
(``harness.cli.run``); a test that records what happened is another. Worker messages arrive as the protocol's own
records (:class:`harness.run.protocol.Message` subclasses: ``Phase``, ``Progress``, ...), never as dicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the CLI subclasses this at import time, and stays quick to start
    from harness.config.trial import TrialSpec
    from harness.data import PreparedData
    from harness.records import TrialOutcome
    from harness.run.devices import ResolvedDevice
    from harness.run.protocol import Message


class SweepListener:
    """Told what a sweep does, in order; override the methods you need (each is a no-op here)."""

    def on_devices(self, resolved: Sequence[ResolvedDevice]) -> None:
        """Where each framework will run (``device = "auto"`` resolved), before a mixed-device run is refused."""

    def on_environment(self, line: str) -> None:
        """A line about a framework's environment: a build starting or done, then where each framework runs."""

    def on_plan(self, todo: Sequence[TrialSpec], data: PreparedData) -> None:
        """The trials still to run, before the first starts."""

    def on_trial_start(self, i: int, n: int, trial: TrialSpec) -> None:
        """Trial ``i`` of ``n`` starts (``i`` counts every trial of the experiment, stored ones included)."""

    def on_trial_message(self, trial: TrialSpec, msg: Message) -> None:
        """A message from ``trial``'s worker (live progress: ``Phase``, ``Progress``, ...)."""

    def on_trial_complete(self, i: int, n: int, outcome: TrialOutcome) -> None:
        """Trial ``i`` of ``n`` ended and its row is stored."""
