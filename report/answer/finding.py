"""A study's verdict (:class:`StudyFinding`) and the noise a difference is judged against (:func:`_difference`):
shared by the seed studies (:mod:`report.answer.studies`, which re-exports them) and the batch_ramp study
(:mod:`report.answer.ramp_study`)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.cells import Stat


@dataclass(frozen=True)
class StudyFinding:
    """One verdict: the claim, for which framework (and variant, where the verdict is one variant's), whether it holds
    (None: cannot be judged), the numbers."""

    study: str
    framework: str
    claim: str
    holds: bool | None
    evidence: str
    #: the variant whose verdict it is ("" for a framework's); where other settings split it too, the words that
    #: tell its series apart (harness.cells.SeriesGroup.label)
    variant: str = ""

    @property
    def name(self) -> str:
        """Whose verdict, as a sentence names it: the framework, or ``framework · variant``."""
        return series_label(self.framework, self.variant)

    @property
    def verdict(self) -> str:
        """``holds``, ``does not hold`` or ``cannot be judged``."""
        return {True: "holds", False: "does not hold", None: "cannot be judged"}[self.holds]

    @property
    def text(self) -> str:
        """The finding as one sentence."""
        return f"{self.name}: “{self.claim}” {self.verdict}: {self.evidence}"


def series_label(framework: str, variant: str | None) -> str:
    """The name of one line in the figures: the framework, and the variant when there is one."""
    return f"{framework} · {variant}" if variant else framework



_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13,
        20: 2.09, 30: 2.04, 60: 2.00, 120: 1.98}


def _t95(df: float) -> float:
    return _T95[max(k for k in _T95 if k <= max(df, 1.0))]


def _difference(a: Stat, b: Stat) -> tuple[float, float | None]:
    """(a - b, the noise: the half-width of Welch's 95 % interval of the difference; None without repeats).

    With two repeats per size the interval is wide (t = 12.7 at one degree of freedom): that is the honest
    answer to "is this more than noise" from two measurements, and why the study file asks for more.
    """
    if a.sd is None or b.sd is None:
        return a.mean - b.mean, None
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    se = (va + vb) ** 0.5
    if se == 0:
        return a.mean - b.mean, 0.0
    df = (va + vb) ** 2 / ((va**2 / (a.n - 1)) + (vb**2 / (b.n - 1)))  # Welch-Satterthwaite
    return a.mean - b.mean, _t95(df) * se
