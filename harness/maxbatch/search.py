"""The max-batch search itself: pure logic, no I/O. A probe function is injected.

Two strategies, both exact (the largest batch whose probe succeeds while the next size fails with
an out-of-memory error, assuming memory is monotone in the batch size at the boundary):

* ``model`` (default): two small probes (1 and 16) give memory(batch) = a + b·batch from the measured
  peaks; a third probe at half the predicted limit refines the slope where it matters; then
  the search probes at and just above the prediction, recalibrates and gallops on a miss, and falls
  back to bisection after two misses, so a wrong model costs a few probes, never correctness.
* ``double-bisect``: what PyTorch Lightning's ``binsearch`` mode does: 1, 2, 4, ... until a failure,
  then bisect. The baseline ``model`` is measured against (benchmarks/maxbatch_strategies.py).

Both end with a *confirm* probe: the answer runs again for longer (more steps, then eval). If that
fails with an out-of-memory error, the size is not the answer and the search continues below it.

A probe that fails for a reason other than memory (crash, timeout, error) is retried; if it fails
again the search stops with :class:`~harness.errors.SearchAborted`: such a size is never taken as
the boundary, because nothing says it ran out of memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.errors import ConfigError, SearchAborted

STRATEGIES = ("model", "double-bisect")
NON_MEMORY_FAILURES = ("crashed", "error", "timeout")


@dataclass(frozen=True)
class ProbeResult:
    """One probe as the search sees it. ``peak_mib`` is in the units the budget is counted in."""

    batch: int
    status: str  # ok / oom / crashed / error / timeout
    peak_mib: float | None = None
    reason: str = ""
    elapsed_s: float = 0.0
    stage: str = ""  # fit / predict / predict+1 / predict-1 / double / bisect / confirm / retry
    confirm: bool = False


#: ``probe(batch, confirm)``: run one probe (``confirm``: the longer run) and say what happened.
ProbeFn = Callable[[int, bool], ProbeResult]


@dataclass(frozen=True)
class SearchSettings:
    """How to search. ``budget_mib`` is used by ``model`` only, to turn the fit into a prediction."""

    strategy: str = "model"
    budget_mib: float | None = None
    fit_batches: tuple[int, ...] = (1, 16)
    max_batch_cap: int = 1 << 20
    retries: int = 1  # how often a non-memory failure is retried before the search gives up
    max_model_misses: int = 2  # predictions that miss before the search only bisects

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if self.strategy == "model" and not (self.budget_mib and self.budget_mib > 0):
            raise ConfigError(f"the model strategy needs a budget in MiB > 0, got {self.budget_mib!r}")
        if not self.fit_batches or min(self.fit_batches) < 1:
            raise ConfigError(f"fit_batches {self.fit_batches!r} must be whole numbers >= 1")
        if self.max_batch_cap < 1 or self.retries < 0:
            raise ConfigError("max_batch_cap must be >= 1 and retries >= 0")


@dataclass(frozen=True)
class LinearFit:
    """memory(batch) = a + b·batch, in MiB."""

    a_mib: float
    b_mib_per_sample: float

    def memory_mib(self, batch: int) -> float:
        """Predicted memory at ``batch``."""
        return self.a_mib + self.b_mib_per_sample * batch

    def predict_batch(self, budget_mib: float) -> int:
        """The largest batch the line keeps within ``budget_mib`` (0 when not even one)."""
        return max(0, math.floor((budget_mib - self.a_mib) / self.b_mib_per_sample))


@dataclass(frozen=True)
class SearchResult:
    """The answer: ``max_batch`` (0: not even batch 1 fits) and how it was found."""

    strategy: str
    max_batch: int
    first_fail: ProbeResult | None  # the out-of-memory probe just above max_batch (None when capped)
    probes: tuple[ProbeResult, ...]
    fit: LinearFit | None
    capped: bool = False  # every size up to max_batch_cap fits

    @property
    def probes_n(self) -> int:
        """Number of worker processes the search started (retries and the confirm run included)."""
        return len(self.probes)

    @property
    def wall_s(self) -> float:
        """Sum of the probes' wall times."""
        return sum(p.elapsed_s for p in self.probes)


def fit_line(points: dict[int, float]) -> LinearFit | None:
    """A line through the measured (batch, peak) points, local to the largest one.

    The slope is the secant between the largest batch and the largest one at most 3/4 of it (a lever
    arm long enough that measurement noise matters little, short enough that a curved memory(batch)
    is followed near the boundary). None when fewer than two points or the slope is not positive.
    """
    if len(points) < 2:
        return None
    batches = sorted(points)
    top = batches[-1]
    partners = [b for b in batches if b <= 0.75 * top] or batches[:1]
    low = partners[-1]
    slope = (points[top] - points[low]) / (top - low)
    if not slope > 0:  # noise can make a short lever arm flat: fall back to least squares over all
        n = len(batches)
        mean_b = sum(batches) / n
        mean_m = sum(points[b] for b in batches) / n
        var = sum((b - mean_b) ** 2 for b in batches)
        slope = sum((b - mean_b) * (points[b] - mean_m) for b in batches) / var if var else 0.0
        if not slope > 0:
            return None
    return LinearFit(a_mib=points[top] - slope * top, b_mib_per_sample=slope)


class _Search:
    """State of one search: the bracket (lo fits, hi fails with oom) and every probe run."""

    def __init__(self, probe: ProbeFn, settings: SearchSettings) -> None:
        self.probe_fn = probe
        self.s = settings
        self.probes: list[ProbeResult] = []
        self.ok: dict[int, float | None] = {}  # batch -> peak (short probes that succeeded)
        self.lo = 0
        self.hi: int | None = None
        self.first_fail: dict[int, ProbeResult] = {}
        self.fit: LinearFit | None = None

    # ---------------------------------------------------------------- probing
    def run(self, batch: int, stage: str, confirm: bool = False) -> str:
        """Probe ``batch`` (retrying non-memory failures); update the bracket; return ``ok`` or ``oom``."""
        result = self._record(self.probe_fn(batch, confirm), stage, confirm)
        for _ in range(self.s.retries):
            if result.status not in NON_MEMORY_FAILURES:
                break
            result = self._record(self.probe_fn(batch, confirm), "retry", confirm)
        if result.status in NON_MEMORY_FAILURES:
            raise SearchAborted(
                f"the probe at batch {batch} failed {self.s.retries + 1} time(s) for a reason other than "
                f"memory ({result.status}: {result.reason}); the search cannot tell whether batch {batch} "
                "fits, so it stops here. Fix that failure (see the probe's log) and run again.",
                tuple(self.probes))
        if result.status == "ok":
            if not confirm:
                self.ok[batch] = result.peak_mib
            self.lo = max(self.lo, batch)
            return "ok"
        if result.status != "oom":
            raise ValueError(f"probe returned an unknown status {result.status!r}")
        if self.hi is None or batch <= self.hi:
            self.hi = batch
            self.first_fail[batch] = result
        if batch <= self.lo:  # a longer run failed where a short one passed: lo must come down
            self.lo = max((b for b in self.ok if b < batch), default=0)
        return "oom"

    def _record(self, result: ProbeResult, stage: str, confirm: bool) -> ProbeResult:
        result = replace(result, stage=stage, confirm=confirm)
        self.probes.append(result)
        return result

    @property
    def settled(self) -> bool:
        return self.hi is not None and self.hi - self.lo <= 1

    @property
    def capped(self) -> bool:
        return self.hi is None and self.lo >= self.s.max_batch_cap

    def _upper(self) -> int:
        return self.hi - 1 if self.hi is not None else self.s.max_batch_cap

    def refit(self) -> LinearFit | None:
        points = {b: p for b, p in self.ok.items() if p is not None}
        self.fit = fit_line(points) or self.fit
        return self.fit

    # ---------------------------------------------------------------- strategies
    def bisect(self) -> None:
        """Bisect (lo, hi) to the boundary; with no hi, double from lo first."""
        while not self.settled and not self.capped:
            if self.hi is None:
                self.run(min(max(1, self.lo * 2), self.s.max_batch_cap), "double")
            else:
                self.run((self.lo + self.hi) // 2, "bisect")

    def calibrated_budget(self, fit: LinearFit) -> float:
        """The budget in the fit's terms, made consistent with what the probes showed.

        A size that fitted needed at most the budget, so the budget is at least its measured peak; a size
        that failed needed more, so the budget is below what the line says it needs. This absorbs the
        difference between what the peak measures and what the limit counts (e.g. a CUDA context, thread
        stacks), without trusting either number alone.
        """
        budget = self.s.budget_mib or 0.0
        lo_peak = self.ok.get(self.lo)
        if lo_peak is not None:
            budget = max(budget, lo_peak)
        if self.hi is not None:
            budget = min(budget, fit.memory_mib(self.hi) - 1e-6)
        return budget

    def _line_cannot_explain_hi(self, fit: LinearFit) -> bool:
        """The line puts the boundary further above the failed size than the bracket is wide.

        A near miss (noise in the peaks, a small constant offset) is worth another guided probe; a line
        that says the failed size fits with room to spare is wrong inside the bracket, and all it could
        still suggest is the size just below the failure (the calibrated budget sits right under the
        line's value at ``hi``), a guess that pays off only when the boundary happens to be there. A
        memory law with a jump (TensorFlow's oneDNN pool on CPU grows by a whole new region: +132 MiB
        between batch 186 and 187) fails like this; bisection is then the best use of the probes.
        """
        if self.hi is None:
            return False
        beyond_hi = fit.predict_batch(self.s.budget_mib or 0.0) - self.hi
        return beyond_hi > self.hi - self.lo

    def guided(self) -> None:
        """Probe at the model's prediction, refit after every probe, with two safeguards.

        With an exact model this is "probe at the prediction, then just above it": two probes. When the
        model keeps undershooting (memory grows slower than the line), the step at least doubles each
        time (galloping). When the first prediction overshoots, the search gallops down from it (2, 4,
        8... below) rather than trusting the same line one size lower. Inside a bracket a model probe
        that does not halve it is followed by a gallop from the side it fell on, and after two such
        misses, or as soon as the line says a size that failed fits with more room than the bracket is
        wide, the line is dropped for plain bisection (TensorFlow's memory on CPU jumps by ~130 MiB
        between two adjacent sizes: no line predicts that), so the worst case stays within twice plain
        bisection.

        Long on purpose: one loop whose state (bracket, fit, misses, gallop step) changes together at every probe;
        its rules are documented and tested as a whole by the oracle suite (tests/maxbatch/test_maxsearch.py).
        """
        undershoots = 0
        misses = 0  # predictions that landed on the wrong side of the boundary
        up_step = 0
        safeguard_next = False
        step = 2
        last_ok = True
        while not self.settled and not self.capped:
            fit = self.refit()
            if fit is None:
                self.bisect()
                return
            guess = fit.predict_batch(self.calibrated_budget(fit))
            if self.hi is None:
                guess = max(guess, self.lo + 1)
                if undershoots >= 2:  # the line keeps undershooting: grow the step exponentially
                    up_step = max(2 * up_step, 2)
                    guess = max(guess, self.lo + up_step)
                batch, stage = min(guess, self.s.max_batch_cap), "predict"
            elif (misses >= 2 or self._line_cannot_explain_hi(fit)) and not safeguard_next:
                # the line has missed twice, or it says the failed size fits with more room than the
                # bracket is wide: it does not describe this memory near the boundary; bisect
                self.bisect()
                return
            elif safeguard_next:
                # gallop from the side the model's last probe fell on, never past the middle: a near miss
                # costs a few probes, a wild one no more than bisection
                mid = (self.lo + self.hi) // 2
                batch = min(self.lo + step, mid) if last_ok else max(self.hi - step, mid)
                batch, stage = min(max(batch, self.lo + 1), self.hi - 1), "gallop"
                step *= 2
            else:
                batch, stage = min(max(guess, self.lo + 1), self.hi - 1), "predict"
            width = self.hi - self.lo if self.hi is not None else None
            outcome = self.run(batch, stage)
            if width is None and self.hi is None and outcome == "ok":
                undershoots += 1
            if stage == "predict" and width is None and outcome == "oom" and undershoots == 0:
                # the first prediction overshot: all it says is that the line is off by an unknown amount
                # (the calibrated line would only step one below the failure), so gallop down from it
                last_ok, safeguard_next = False, True
                step = 2
                misses += 1
            elif stage == "predict":
                last_ok = outcome == "ok"
                halved = width is not None and self.hi is not None and (self.hi - self.lo) * 2 <= width
                safeguard_next = width is not None and not halved
                misses += safeguard_next
                if halved or width is None:
                    step = 2
                # a miss is usually a few % of the bracket: start there; after repeated misses keep the
                # step growing (a large constant error in the measured peaks would otherwise cost a new
                # gallop from a small step every time)
                step = max(step, 2, (width or 0) // 32)
            elif stage == "gallop":
                # keep galloping until a probe lands on the other side of the boundary, then trust the model
                safeguard_next = (outcome == "ok") == last_ok

    def model(self) -> None:
        """Small fit probes, an optional third one, then the guided search."""
        for batch in sorted(set(self.s.fit_batches)):
            if batch <= self.lo or (self.hi is not None and batch >= self.hi) or batch > self.s.max_batch_cap:
                continue
            if self.run(batch, "fit") == "oom":
                break
        if self.lo == 0:
            return
        fit = self.refit()
        if fit is not None and self.hi is None:
            predicted = fit.predict_batch(self.calibrated_budget(fit))
            third = predicted // 2
            if third > 2 * self.lo and third <= self.s.max_batch_cap:  # far extrapolation: shorten the lever
                self.run(third, "fit")
        self.guided()

    def confirm(self, search_again: Callable[[], None]) -> None:
        """Run the answer again for longer; if that runs out of memory, search below it and confirm again."""
        while self.lo > 0:
            if self.run(self.lo, "confirm", confirm=True) == "ok":
                return
            search_again()

    def result(self) -> SearchResult:
        fail = self.first_fail.get(self.hi) if self.hi is not None else None
        return SearchResult(strategy=self.s.strategy, max_batch=self.lo, first_fail=fail,
                            probes=tuple(self.probes), fit=self.fit, capped=self.capped)


def search(probe: ProbeFn, settings: SearchSettings) -> SearchResult:
    """Find the largest batch that fits, with ``settings.strategy``; every probe goes through ``probe``.

    Raises:
        SearchAborted: a probe failed twice for a reason other than memory.
    """
    state = _Search(probe, settings)
    if settings.strategy == "model":
        state.model()
        state.confirm(state.guided)
    else:
        state.run(1, "double")
        state.bisect()
        state.confirm(state.bisect)
    return state.result()
