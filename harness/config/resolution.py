"""A max-batch search's resolution: when its bracket is narrow enough (issue 31). Plain data, read by the search
(harness/maxbatch/search.py), the ``maxbatch --granularity`` flag and the experiment key ``max_batch_granularity``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class Resolution:
    """When a bracket is narrow enough: answers on multiples of ``step`` (sizes below it excepted) and the bracket
    within ``tolerance_pct`` of the answer (0: adjacent sizes on the grid)."""

    step: int = 1
    tolerance_pct: float = 1.0

    def __post_init__(self) -> None:
        if self.step < 1 or not 0 <= self.tolerance_pct <= 50:
            raise ConfigError(f"a resolution needs a step >= 1 and a tolerance in 0..50 %, got step {self.step} and "
                              f"{self.tolerance_pct} %")

    @classmethod
    def parse(cls, text: str, name: str = "--granularity") -> Resolution:
        """``exact``, ``N%`` (within N % of the answer), ``K`` (multiples of K, exactly) or ``K,N%`` (both);
        ``name``: how the user wrote the setting, for the refusal. Anything else is refused, never read in part:
        two steps (``8,16``) or two tolerances (``1%,2%``) cannot both hold, and keeping one of them would drop
        what the user typed (issue 43)."""
        words = [w.strip() for w in text.lower().split(",")]
        if words == ["exact"]:
            return cls(1, 0.0)
        steps = [w for w in words if not w.endswith("%")]
        pcts = [w[:-1].strip() for w in words if w.endswith("%")]
        usage = ("is not 'exact', N% (N in 0..50, e.g. 1%), K (multiples of K >= 1, e.g. 8) or K,N% (e.g. 8,1%)")
        if "" in words:
            raise ConfigError(f"{name} {text!r} {usage}")
        if len(steps) > 1 or len(pcts) > 1:
            what = "two steps" if len(steps) > 1 else "two tolerances"
            raise ConfigError(f"{name} {text!r} gives {what}; a resolution has at most one step K and one "
                              f"tolerance N% ({usage[7:]})")
        try:
            step = int(steps[0]) if steps else 1
            pct = float(pcts[0]) if pcts else 0.0
        except ValueError:
            raise ConfigError(f"{name} {text!r} {usage}") from None
        if step < 1 or not 0 <= pct <= 50:  # "nan" fails 0 <= pct, as it should
            raise ConfigError(f"{name} {text!r} {usage}")
        return cls(step, pct)

    @property
    def label(self) -> str:
        """How it is written on the command line (``exact``, ``1%``, ``8``, ``8,1%``)."""
        if self.step == 1 and not self.tolerance_pct:
            return "exact"
        pct = f"{self.tolerance_pct:g}%" if self.tolerance_pct else ""
        return ",".join(p for p in (str(self.step) if self.step > 1 else "", pct) if p)

    def allowed(self, lo: int) -> int:
        """The widest bracket (hi - lo) that settles a search whose largest fitting size is ``lo``."""
        within = 1 + math.floor(lo * self.tolerance_pct / 100.0)
        return max(self.step, within) if lo >= self.step else within

    def snap(self, batch: int) -> int:
        """``batch`` down to the grid (unchanged below the step)."""
        return batch // self.step * self.step if batch >= self.step else batch
