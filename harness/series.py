"""What one line of a figure or one recommendation is about: a :class:`Series`, a framework under one set of settings.

Its own module, below both the stored record (:mod:`harness.store.trial_record`, whose ``series`` it is) and the
cells' statistics (:mod:`harness.cells`, which group records by it), so each names the other's types without an
import circle. ``harness.cells.Series`` and ``harness.cells.device_of`` are the same objects, imported from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: trial columns whose combination makes a series within one framework: the experiment's named variant
#: ([variants.<name>]), then settings as asked for, never as measured (the stored ``device`` is the framework's own
#: name for it, "cpu" / "/CPU:0" / "cpu(0)", and would split every sweep), then the gradient accumulation
VARIANT_COLUMNS = ("variant", "precision", "math_mode", "denormals", "accumulate_steps", "run_device")


@dataclass(frozen=True, order=True)
class Series:
    """A framework under one set of settings: the unit of a recommendation and of a figure's line."""

    framework: str
    variant: str = ""  # the experiment's named variant ("" without variants)
    precision: str = ""
    math_mode: str = ""  # asked for (ieee | tf32 | framework-default); "" in rows stored before it existed
    denormals: str = ""
    accumulate_steps: int = 1
    #: ``cpu`` / ``gpu``: the device the trial was told to use (``run_device``, issue 29); "" where unresolved.
    #: Shown only where it varies: a run allowed on mixed devices (allow_mixed_devices) never pools them
    device: str = ""

    @classmethod
    def of(cls, trial: Mapping[str, Any]) -> Series:
        """The series of one trial row (any status: a failed row carries its settings too); a stored record's is
        its ``series``."""
        return cls(framework=str(trial["framework"]), variant=str(trial.get("variant") or ""),
                   precision=str(trial.get("precision") or ""), math_mode=str(trial.get("math_mode") or ""),
                   denormals=str(trial.get("denormals") or ""),
                   accumulate_steps=int(trial.get("accumulate_steps") or 1),
                   device=device_of(trial))

    @property
    def line(self) -> Series:
        """The line a report draws this series on: its framework and named variant (a study's variants are a line
        each; the other settings are told apart by a cell's label)."""
        return Series(framework=self.framework, variant=self.variant)

    def settings(self) -> tuple[str, ...]:
        """The settings part, as words (``("sgd", "fp32", "flush", "accumulate x4")``)."""
        return (self.variant, self.precision, self.math_mode, self.denormals,
                f"accumulate x{self.accumulate_steps}" if self.accumulate_steps > 1 else "", self.device)


def device_of(trial: Mapping[str, Any]) -> str:
    """A trial row's device class, ``cpu`` or ``gpu`` (its ``run_device``), or "" where it was not resolved."""
    device = str(trial.get("run_device") or "")
    return device if device in ("cpu", "gpu") else ""
