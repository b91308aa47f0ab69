"""The max-batch search itself: pure logic, no I/O. A probe function is injected.

Three strategies; all stop when the bracket (the largest size that fitted, the smallest that ran out of memory) is
within the :class:`Resolution`: by default within 1 % of the answer (on a GPU also on multiples of 8, which tensor
cores prefer), ``exact`` for adjacent sizes (issue 31). All assume memory is monotone in the batch size at the
boundary.

* ``model`` (default, issue 41): where the adapter offers a step-memory estimate (``expect_estimate``: PyTorch,
  JAX), the first probe (at the larger fit size, 16) brings the framework's own estimate of a step's peak at two
  sizes: its slope through that probe's measured figure (which holds what the estimate cannot know: runtime,
  libraries, allocator pools) predicts the boundary before any probe near it (:meth:`_Search.estimated`). The size
  probed next is that prediction less ``ESTIMATE_HEDGE``; from there the guided search below finishes, with a line
  from probes near the boundary. Where the boundary repeats between processes (``probe_is_confirm``: GPU budgets;
  a CPU boundary does not, measured) those probes train as long as the confirm run, so the answer's own probe is its
  confirm run. A prediction that runs out of
  memory costs a probe at ``ESTIMATE_FALLBACK`` of it, and an estimate off by more is dropped: it changes the probes,
  never the answer. Without an estimate, ``fitted``.
* ``fitted`` (the ``model`` of before issue 41): two small probes (1 and 16) give memory(batch) = a + b·batch from
  what grows with the batch: the framework's allocated peak where it reports one (on a GPU), else the peak in the
  budget's units, less any reserved or pool figure within ``censor_pct`` of the budget (censored: it says "at most
  the budget", not how much the batch needed). A third probe at 3/4 of the predicted limit refines the slope where
  it matters. Then the guided search (:meth:`_Search.guided`): a probe just below the line's boundary and one a
  resolution above it settle an exact line; steps that grow relative to ``lo`` where the line undershoots; inside a
  bracket the line's estimate with safeguards that shrink the bracket at every probe, and bisection once the line
  keeps missing.
* ``double-bisect``: what PyTorch Lightning's ``binsearch`` mode does: 1, 2, 4, ... until a failure, then bisect
  to the same resolution. The baseline ``model`` is measured against (benchmarks/maxbatch_sim.py against memory
  laws, benchmarks/maxbatch_strategies.py against real workers).

All end with a *confirm* probe: the answer runs again for longer (more steps, then eval), in a second process. If
that fails with an out-of-memory error, the size is not the answer and the search continues below it. The one
exception (issue 41): ``model``'s probes near an estimate's prediction train the confirm length already, and where
such a probe is the answer, the bracket is settled within the resolution and no probe showed the boundary moving
between processes, that probe is the answer's confirm run (:meth:`_Search.own_run_confirms`).

Where the peaks are what the budget counts (CPU: ``spread_from_peaks``), a boundary that moves between fresh
processes is measured (peaks out of order, sizes that fitted and then failed their confirm run), and the search
stops once its bracket is within that spread, even where the resolution asks for less (issue 43): below it, probes
measure the noise, not the model. The result says so (``SearchResult.note``).

A probe that fails for a reason other than memory (crash, timeout, error) is retried; if it fails
again the search stops with :class:`~harness.errors.SearchAborted`: such a size is never taken as
the boundary, because nothing says it ran out of memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.config.resolution import Resolution  # its home; imported from here too
from harness.errors import ConfigError, SearchAborted
from harness.numbers import linear_fit
from harness.records import ProbeResult as ProbeResult  # its home: a max-batch answer keeps its probes

STRATEGIES = ("model", "fitted", "double-bisect")
#: after the size an estimate predicted ran out of memory, the next probe takes the estimate to have been up to this
#: far off, and 10 % more: at these fractions of that size, a second point for the line with a long lever, below the
#: boundary for an estimate up to 50 % low; where they fail too the estimate is dropped and the search fits its line
#: from small probes (issue 41). Chosen with benchmarks/maxbatch_sim.py: 0.5 put the probe at the boundary of a
#: 50 %-low estimate (censored on a GPU: 11 probes on ``h100`` before the search stepped up from a censored figure);
#: 0.75 or 0.8 first, then 0.45, cost 1-4 more at 50 % off
ESTIMATE_MAX_ERROR = 0.5
ESTIMATE_FALLBACK = ((1.0 - ESTIMATE_MAX_ERROR) * 0.9,)
#: with an estimate that held (its size fitted), the line is a secant between fitting sizes beyond the first probe
#: whose smaller end is at most this fraction of the larger, else the estimate's slope through the largest: the first
#: probe's figure anchors the prediction only. Measured (PyTorch tiny_cnn on CPU, fixed mmap threshold): 298 MiB at
#: batch 1, 321 at 136, 336 at 250: 0.17 MiB per sample from 1 to 136, 0.13 from 136 on, as the estimate said (0.137):
#: a secant through batch 1 carries a small batch's own costs to the boundary (8 probes where 5 did)
ESTIMATE_LEVER = 0.9
#: the first size probed near the boundary is the estimate's prediction less this fraction of it (and at least half a
#: resolution): a prediction a little too large then still fits, and the line through what it measured settles the
#: bracket in one or two probes, where a failure there costs a probe far below (ESTIMATE_FALLBACK). Where the answer's
#: own probe is its confirm run (``SearchSettings.probe_is_confirm``: GPU budgets), a hedge costs a right estimate
#: nothing: the line from the hedged size, with the estimate's slope, lands within half a resolution of the boundary
#: (on a CPU the confirm run is a process of its own, so the hedge costs one probe there). Chosen with
#: benchmarks/maxbatch_sim.py over estimates 0, 2, 5, 8, 20 and 50 % off either way (worst probes summed over the
#: goal laws and alloc-frag: 0.03: 304, 0.05: 297, 0.08: 294, 0.10: 299, 0.12: 306) and the predictions measured on
#: this CPU: PyTorch's 0-2.1 % too large, JAX's 2.2-7.6 % (3 % made JAX's predicted size fail on three of four models)
ESTIMATE_HEDGE = 0.08
NON_MEMORY_FAILURES = ("crashed", "error", "timeout")
#: a reserved or pool figure this close to a GPU budget (in % of it) is censored: the pool took what it could
GPU_CENSOR_PCT = 3.0
#: with ``spread_from_peaks``: after this many sizes fitted a short probe and failed their confirm run, the boundary
#: is taken to move between processes across all of them (issue 43: an exact search walked down one confirm failure
#: at a time for 20+ workers), and the search settles within that spread; at twice as many the bracket the last one
#: left is settled as it is, so no search walks down further than that
MOVED_CONFIRMS = 2


#: ``probe(batch, confirm)``: run one probe (``confirm``: the longer run) and say what happened.
ProbeFn = Callable[[int, bool], ProbeResult]


#: the defaults: within 1 % of the answer; on a GPU on multiples of 8 too
CPU_RESOLUTION = Resolution(1, 1.0)
GPU_RESOLUTION = Resolution(8, 1.0)
EXACT = Resolution(1, 0.0)


@dataclass(frozen=True)
class SearchSettings:
    """How to search. ``budget_mib`` is used by ``model`` and ``fitted`` only, to turn the fit into a prediction.

    ``model`` predicts its first size near the boundary from the framework's own estimate where the first probe
    brought one (``ProbeResult.estimate_mib``), and fits its line from probes where it did not; ``fitted`` always
    fits it from probes (the search before issue 41)."""

    strategy: str = "model"
    budget_mib: float | None = None
    fit_batches: tuple[int, ...] = (1, 16)
    max_batch_cap: int = 1 << 20
    retries: int = 1  # how often a non-memory failure is retried before the search gives up
    max_model_misses: int = 3  # model probes inside a bracket that miss on one side before the search only bisects
    resolution: Resolution = field(default_factory=lambda: CPU_RESOLUTION)
    #: a peak within this % of the budget is censored (a GPU pool's reserved figure: it fills what it may); 0 on CPU,
    #: where the peak is what the limit counts
    censor_pct: float = 0.0
    #: the peaks are what the budget counts (CPU's VmData under RLIMIT_DATA), each from a fresh process: two of them
    #: out of order (a smaller size's peak above a larger one's) show the boundary moving between processes by at
    #: least that much, and the search stops where its bracket is within that spread (issue 43). False where a peak
    #: is a figure beside what the budget counts (a GPU pool's), whose noise moves no boundary
    spread_from_peaks: bool = False
    #: the least process-to-process spread to assume, in MiB (0: only what the probes show)
    spread_mib: float = 0.0
    #: ``model``: the first probe will bring the framework's step-memory estimate (the adapter offers one, issue 41):
    #: it runs at the larger fit size, whose figure anchors the estimate. False: ``model`` searches as ``fitted``
    expect_estimate: bool = False
    #: ``model`` with an estimate: the probes near the predicted boundary train the confirm run's length, and the
    #: answer's own probe is its confirm run where the probes showed no spread (issue 41). False where the boundary is
    #: known to move between fresh processes (every CPU budget: by tens of MiB under glibc's adaptive mmap threshold,
    #: issues 22 and 43, and by more than 1 % even under a fixed one, measured 2026-11-28): the probes stay short and
    #: every answer is confirmed in a second process
    probe_is_confirm: bool = True

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        if self.strategy in ("model", "fitted") and not (self.budget_mib and self.budget_mib > 0):
            raise ConfigError(f"the model strategy needs a budget in MiB > 0, got {self.budget_mib!r}")
        if not self.fit_batches or min(self.fit_batches) < 1:
            raise ConfigError(f"fit_batches {self.fit_batches!r} must be whole numbers >= 1")
        if self.max_batch_cap < 1 or self.retries < 0:
            raise ConfigError("max_batch_cap must be >= 1 and retries >= 0")
        if not 0 <= self.censor_pct < 100:
            raise ConfigError(f"censor_pct {self.censor_pct!r} must be in 0..100")
        if not (math.isfinite(self.spread_mib) and self.spread_mib >= 0):
            raise ConfigError(f"spread_mib {self.spread_mib!r} must be a finite number >= 0")


@dataclass(frozen=True)
class SearchLine:
    """memory(batch) = a + b·batch, in MiB: the search's model of a step's memory, from two points or an estimate's
    slope through one (not a least-squares line: that is :class:`harness.numbers.LinearFit`). Named ``LinearFit``
    before issue 39; the old name still resolves here, with a warning."""

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
    first_fail: ProbeResult | None  # the out-of-memory probe that bounds max_batch from above (None when capped)
    probes: tuple[ProbeResult, ...]
    fit: SearchLine | None
    capped: bool = False  # every size up to max_batch_cap fits
    resolution: Resolution = EXACT
    #: the process-to-process spread the search measured (MiB, and samples by the fitted slope); 0: none seen
    spread_mib: float = 0.0
    spread_samples: int = 0
    #: why the search stopped where the resolution alone would not have ("" when it did not): the spread
    note: str = ""
    #: issue 41: the framework's estimate as a line (MiB = a + b·batch, its own batch-independent part and slope), the
    #: boundary predicted from it with the fixed cost the first probe measured (``predicted_batch``), and what
    #: became of it (``estimate_note``: why none was used, or how it was used)
    estimate: SearchLine | None = None
    predicted_batch: int | None = None
    estimate_note: str = ""
    #: where ``fit``'s slope came from: "" (the probes' figures) or, where no two probes near the boundary were far
    #: enough apart, the estimate's slope through the largest fitting size ("estimate")
    fit_source: str = ""

    @property
    def probes_n(self) -> int:
        """Number of worker processes the search started (retries and the confirm run included)."""
        return len(self.probes)

    @property
    def wall_s(self) -> float:
        """Sum of the probes' wall times."""
        return sum(p.elapsed_s for p in self.probes)


def fit_line(points: dict[int, float]) -> SearchLine | None:
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
        line = linear_fit([(b, points[b]) for b in batches])
        slope = line.slope if line is not None else 0.0
        if not slope > 0:
            return None
    return SearchLine(a_mib=points[top] - slope * top, b_mib_per_sample=slope)


def estimate_line(points: tuple[tuple[int, float], ...]) -> SearchLine | None:
    """The framework's estimate as memory(batch) = a + b·batch through its sizes (least squares over more than two,
    :func:`harness.numbers.linear_fit`); None with fewer than two sizes or a slope that is not positive."""
    line = linear_fit(list(points))
    if line is None or not line.slope > 0:
        return None
    return SearchLine(a_mib=line.intercept, b_mib_per_sample=line.slope)


def _overall_slope(points: dict[int, float]) -> float | None:
    """MiB per sample by least squares over every fitting size: the spread's scale, where a local secant through two
    noisy neighbours could be near flat and turn a few MiB into thousands of samples. None when not positive."""
    if len(points) < 2:
        return None
    n = len(points)
    mean_b = sum(points) / n
    mean_m = sum(points.values()) / n
    var = sum((b - mean_b) ** 2 for b in points)
    slope = sum((b - mean_b) * (m - mean_m) for b, m in points.items()) / var if var else 0.0
    return slope if slope > 0 else None


#: ``progress(probe, lo, hi)``: called after every probe with the bracket it left (hi None: no failure yet)
Progress = Callable[[ProbeResult, int, "int | None"], None]


class _Search:
    """State of one search: the bracket (lo fits, hi fails with oom) and every probe run."""

    def __init__(self, probe: ProbeFn, settings: SearchSettings, progress: Progress | None = None) -> None:
        self.probe_fn, self.s, self.progress = probe, settings, progress
        self.res = settings.resolution
        #: the cap on the resolution's grid: a search answering on multiples of K never answers the cap off it
        self.cap = self.res.snap(settings.max_batch_cap)
        self.probes: list[ProbeResult] = []
        self.ok: dict[int, ProbeResult] = {}  # batch -> the short probe that fitted there (the last one)
        self.lo = 0
        self.hi: int | None = None
        self.first_fail: dict[int, ProbeResult] = {}
        self.fit: SearchLine | None = None
        #: with ``spread_from_peaks``: sizes that fitted in one process and failed in another (a confirm run), and the
        #: bracket each left, in samples: the boundary moves across them (issue 43)
        self.moved: list[int] = []
        self.moved_samples = 0
        #: issue 41: the framework's estimate (its own line), the boundary predicted from it, and what became of it
        self.estimate: SearchLine | None = None
        self.predicted: int | None = None
        self.estimate_note = ""
        #: while the estimate holds: its slope, and the first probe's size (an anchor only, never a point of the line)
        self.prior_slope: float | None = None
        self.anchor: int | None = None
        #: issue 41: while set, every search probe trains as long as the confirm run (the estimate's probes near the
        #: boundary), so the size that becomes the answer has run its confirm length already (:meth:`confirm`)
        self.long_probes = False
        #: sizes that fitted a run of the confirm length (a confirm run, or a search probe made as long)
        self.long_ok: set[int] = set()
        #: the first guided probe after the estimate's predicted size ran out of memory (see :meth:`_target`)
        self.below_estimate_fail = False
        #: the size the estimate predicted, where it ran out of memory (None: it fitted, or no estimate)
        self.estimate_fail: int | None = None

    # ---------------------------------------------------------------- probing
    def run(self, batch: int, stage: str, confirm: bool = False) -> str:
        """Probe ``batch`` (retrying non-memory failures); update the bracket; return ``ok`` or ``oom``. ``confirm``:
        the answer's confirm run; a search probe trains as long where :attr:`long_probes` is set (its result's
        ``confirm`` says it ran the confirm length, its ``stage`` what it was for)."""
        long = confirm or self.long_probes
        result = self._record(self.probe_fn(batch, long), stage, long)
        for _ in range(self.s.retries):
            if result.status not in NON_MEMORY_FAILURES:
                break
            result = self._record(self.probe_fn(batch, long), "retry", long)
        if result.status in NON_MEMORY_FAILURES:
            raise SearchAborted(
                f"the probe at batch {batch} failed {self.s.retries + 1} time(s) for a reason other than "
                f"memory ({result.status}: {result.reason}); the search cannot tell whether batch {batch} "
                "fits, so it stops here. Fix that failure (see the probe's log) and run again.",
                tuple(self.probes))
        if result.status == "ok":
            if not confirm:
                self.ok[batch] = result
            if long:
                self.long_ok.add(batch)
            self.lo = max(self.lo, batch)
        elif result.status != "oom":
            raise ValueError(f"probe returned an unknown status {result.status!r}")
        else:
            if self.hi is None or batch <= self.hi:
                self.hi = batch
                self.first_fail[batch] = result
            if batch <= self.lo:  # a longer run failed where a short one passed: lo must come down
                self.lo = max((b for b in self.ok if b < batch), default=0)
                if self.s.spread_from_peaks and batch in self.ok:  # fitted in one process, failed in the next
                    self.moved.append(batch)
                    if len(self.moved) >= 2 * MOVED_CONFIRMS:  # no further search below: the bracket left stands
                        self.moved_samples = max(self.moved_samples, batch - self.lo)
                    elif len(self.moved) == MOVED_CONFIRMS:  # not a longer run's growth once: the boundary moves
                        self.moved_samples = max(self.moved) - min(self.moved) + 1  # across every one of them
        if self.progress is not None:
            self.progress(result, self.lo, self.hi)
        return result.status

    def _record(self, result: ProbeResult, stage: str, confirm: bool) -> ProbeResult:
        result = replace(result, stage=stage, confirm=confirm)
        self.probes.append(result)
        return result

    @property
    def settled(self) -> bool:
        return self.hi is not None and self.hi - self.lo <= max(self.res.allowed(self.lo), self.spread_samples())

    def spread_mib(self) -> float:
        """How far the boundary moves between processes, as the probes show it (``spread_from_peaks``): the most a
        fitting size's peak exceeded a larger fitting size's (each a fresh process; a monotone law never does),
        at least ``spread_mib``. What the search can tell apart ends there (issue 43)."""
        seen, highest = 0.0, None
        if self.s.spread_from_peaks:
            for _, peak in sorted((b, p.peak_mib) for b, p in self.ok.items() if p.peak_mib is not None):
                if highest is not None:
                    seen = max(seen, highest - peak)
                highest = peak if highest is None else max(highest, peak)
        return max(self.s.spread_mib, seen)

    def spread_samples(self) -> int:
        """The spread in samples: :meth:`spread_mib` by the least-squares slope of every fitting size, and at least the
        range of the sizes that fitted in one process and failed in another (0: none seen)."""
        mib = self.spread_mib()
        points = self.points()
        slope = _overall_slope(points) if mib else None
        if mib and points and self.hi is not None and self.s.budget_mib:
            # a failure at hi says the line climbs at least from the smallest size's figure to the budget by then
            # (less the spread): a floor for a slope that a short lever arm through noisy peaks can leave near flat
            floor = (self.s.budget_mib - points[min(points)] - mib) / self.hi
            slope = max(slope or 0.0, floor) or None
        if not mib or slope is None or not slope > 0:
            return self.moved_samples
        return max(self.moved_samples, math.ceil(mib / slope))

    @property
    def capped(self) -> bool:
        return self.hi is None and self.lo >= self.cap

    def _allowed(self) -> int:
        """The widest settled bracket from ``lo``, on the grid the probes use."""
        a = self.res.allowed(self.lo)
        return a if self.lo < self.res.step else max(self.res.step, self.res.snap(a))

    def _inside(self, batch: int) -> int:
        """``batch`` on the grid, strictly inside the bracket (above ``lo`` only, without a failure yet)."""
        top = self.hi - 1 if self.hi is not None else self.cap
        batch = min(max(batch, self.lo + 1), top)
        snapped = self.res.snap(batch)
        if snapped > self.lo:
            return snapped
        up = (self.lo // self.res.step + 1) * self.res.step
        return up if up <= top else batch

    # ---------------------------------------------------------------- the model
    def points(self) -> dict[int, float]:
        """What grows with the batch, per fitting size: allocated peaks where every such probe reported one, else
        the peaks, less those a pool filled to within ``censor_pct`` of the budget (they only say "at most")."""
        fitted = list(self.ok.values())
        if fitted and all(p.growth_mib is not None for p in fitted):
            return {p.batch: float(p.growth_mib) for p in fitted}  # type: ignore[arg-type]
        ceiling = (self.s.budget_mib or 0.0) * (1.0 - self.s.censor_pct / 100.0)
        return {p.batch: p.peak_mib for p in fitted
                if p.peak_mib is not None and not (self.s.censor_pct and p.peak_mib >= ceiling)}

    def refit(self) -> SearchLine | None:
        line = self._estimated_fit() if self.prior_slope is not None else fit_line(self.points())
        self.fit = line or self.fit
        return self.fit

    def line_points(self) -> dict[int, float]:
        """The fitting sizes' figures a line is drawn from: all of them, less the first probe's while an estimate holds
        (it anchored the prediction; a small batch's own costs would tilt a line through it)."""
        return {b: m for b, m in self.points().items() if b != self.anchor or self.prior_slope is None}

    def _estimated_fit(self) -> SearchLine | None:
        """While the estimate holds: a secant between fitting sizes beyond the first probe, the smaller at most
        ``ESTIMATE_LEVER`` of the larger, else the estimate's slope through the largest (None: none fitted yet)."""
        pts = self.line_points()
        if not pts or self.prior_slope is None:
            return None
        top = max(pts)
        partners = [b for b in pts if b <= ESTIMATE_LEVER * top]
        if partners:
            low = max(partners)
            slope = (pts[top] - pts[low]) / (top - low)
            if slope > 0:
                return SearchLine(a_mib=pts[top] - slope * top, b_mib_per_sample=slope)
        return SearchLine(a_mib=pts[top] - self.prior_slope * top, b_mib_per_sample=self.prior_slope)

    def fit_source(self) -> str:
        """"estimate" where the search's line has the estimate's slope (see :meth:`_estimated_fit`), else ""."""
        if self.fit is None or self.estimate is None:
            return ""
        return "estimate" if self.fit.b_mib_per_sample == self.estimate.b_mib_per_sample else ""

    def calibrated_budget(self, fit: SearchLine) -> float:
        """The budget in the fit's terms, made consistent with what the probes showed.

        A size that fitted needed at most the budget, so the budget is at least its measured figure; a size
        that failed needed more, so the budget is below what the line says it needs. This absorbs the
        difference between what the figure measures and what the limit counts (e.g. a CUDA context, thread
        stacks), without trusting either number alone.
        """
        budget = self.s.budget_mib or 0.0
        lo_figure = self.points().get(self.lo)
        if lo_figure is not None:
            budget = max(budget, lo_figure)
        if self.hi is not None:
            budget = min(budget, fit.memory_mib(self.hi) - 1e-6)
        return budget

    def _scatter_mib(self, fit: SearchLine) -> float:
        """How far the line misses the measured points it was not drawn through (noise in the peaks), in MiB."""
        return max((abs(m - fit.memory_mib(b)) for b, m in self.line_points().items()), default=0.0)

    def _nominal(self, fit: SearchLine) -> int:
        """The line's boundary at the budget, raised to what fitted (not lowered by any failure)."""
        budget = self.s.budget_mib or 0.0
        lo_figure = self.points().get(self.lo)
        return fit.predict_batch(max(budget, lo_figure) if lo_figure is not None else budget)

    # ---------------------------------------------------------------- strategies
    def bisect(self) -> None:
        """Bisect (lo, hi) to the resolution; with no hi, double from lo first."""
        while not self.settled and not self.capped:
            if self.hi is None:
                self.run(min(max(1, self.lo * 2), self.cap), "double")
            else:
                self.run(self._inside((self.lo + self.hi) // 2), "bisect")

    def _target(self, fit: SearchLine, ups: int) -> tuple[int, str]:
        """The next model probe and its stage: ``up`` (below the line's boundary, no failure yet), ``step`` (the line
        has nothing beyond ``lo``: a step from it), ``close`` (one probe settles the bracket), ``model`` (inside a
        bracket, from the line), ``bisect`` (the line says nothing there). See :meth:`guided`."""
        a_lo = max(self._allowed(), self.spread_samples())  # a step within the spread between processes tells nothing
        nominal = self._nominal(fit)
        estimate = fit.predict_batch(self.calibrated_budget(fit))
        a = max(a_lo, self.res.allowed(min(estimate, self.hi or estimate)))  # the resolution where the boundary is
        # after the closing probe, while sizes keep fitting beyond the line: 1 % of lo (at least a resolution), doubling
        step_up = a_lo if ups <= 1 else min(max(a_lo, math.ceil(self.lo / 100)) << (ups - 2), max(self.lo, a_lo))
        if self.hi is None:  # below the estimate by half a resolution, or by what the line misses its points by
            hedge = max(a // 2, math.ceil(self._scatter_mib(fit) / fit.b_mib_per_sample))
            if estimate - hedge > self.lo + step_up:
                return min(estimate - hedge, self.cap), "up"
            return min(self.lo + step_up, self.cap), "step"
        width = self.hi - self.lo
        if width <= 2 * a_lo:  # one probe settles it: the one nearest the estimate
            return min(max(estimate, self.hi - a_lo), self.lo + a_lo), "close"
        if self.hi >= 8 * max(self.lo, 1):  # a bracket across orders of magnitude: halve it in ratio
            return math.isqrt(max(self.lo, 1) * self.hi), "model"
        if self.lo not in self.points():  # lo's figure was censored: the line says nothing about what is above it
            if self.hi == self.estimate_fail and self.lo + step_up < (self.lo + self.hi) // 2:
                # the failure above is the estimate's predicted size, far off: step up from lo as without a failure
                return self.lo + step_up, "step"
            return (self.lo + self.hi) // 2, "bisect"
        if nominal >= self.hi:
            # the line's boundary failed: it missed by at least (nominal - hi + 1) samples; take it to miss by twice
            # that (at least two resolutions), never below the middle (a line that says the failed size fits with
            # room to spare is no guide: that is bisection)
            target = max(self.hi - 2 * max(nominal - self.hi + 1, a), (self.lo + self.hi) // 2)
        elif estimate < self.lo + step_up:
            return self.lo + min(step_up, width // 2), "step"
        elif self.below_estimate_fail:
            # the bracket's failure is the estimate's predicted size, not the line's: the line has not been tried
            # inside it yet. Aim below its boundary as ``up`` does, so that the probe likely fits and one a resolution
            # above settles the bracket
            target = estimate - max(a // 2, math.ceil(self._scatter_mib(fit) / fit.b_mib_per_sample))
        else:
            target = estimate
        if width <= 4 * a_lo:  # one probe leaves a bracket one probe settles, whichever way it goes
            target = min(max(target, self.hi - 2 * a_lo), self.lo + 2 * a_lo)
        return min(max(target, self.lo + a_lo), self.hi - a_lo), "model"

    def guided(self) -> None:
        """Probe where the line puts the boundary; every rule keeps a wrong line cheap (issue 31).

        Without a failure yet (``up``): one probe below the line's boundary by half a resolution, or by as many samples
        as the line misses its own points by (noise in the peaks); then (``step``) one a resolution above the size
        that fitted, which settles an exact line in two probes. While sizes keep fitting beyond the line (a reserved
        figure that was censored says nothing above it), the step grows relative to ``lo``: 1 % of it, 2 %, 4 %...,
        at most ``lo``, never restarting from a sample or two.

        Inside a bracket (``model``): a bracket more than 8x wide is halved in ratio; where ``lo``'s own figure was
        censored, bisected. Where the line's boundary failed, it missed by at least (its boundary - hi + 1): the next
        probe takes it to miss by twice that (at least two resolutions), never below the middle. Otherwise the line's
        estimate, at least a resolution from either end; within 4 resolutions, kept where either outcome leaves a
        bracket one probe settles, and within 2 (``close``) the one probe that settles it, nearest the estimate. So a
        size one below a failure is probed only when the bracket is that narrow. A probe that does not halve the
        bracket is a miss; after ``max_model_misses`` the rest is bisected, so every probe shrinks the bracket and a
        wrong line costs at most a few probes over bisection.
        """
        ups = misses = 0
        while not self.settled and not self.capped:
            fit = self.refit()
            if fit is None or misses >= self.s.max_model_misses:
                self.bisect()
                return
            target, stage = self._target(fit, ups)
            width = self.hi - self.lo if self.hi is not None else None
            batch = self._inside(target)
            outcome = self.run(batch, stage)
            self.below_estimate_fail = False
            ups = (ups + 1 if stage in ("step", "close") else ups) if outcome == "ok" else 0
            if width is not None and self.hi is not None and (self.hi - self.lo) * 2 > width:
                misses += 1

    def model(self) -> None:
        """``model``: the larger fit size first (its figure anchors the estimate: measured on PyTorch's CPU path, batch
        1 carried costs of its own that a line through it took to the boundary, 10 % high for tiny_cnn), then the
        framework's estimate where that probe brought one (:meth:`estimated`), else what ``fitted`` does."""
        if not self.s.expect_estimate:  # the adapter has none to give (TensorFlow, MXNet): the fitted line
            self.fitted()
            return
        first = min(max(self.s.fit_batches), self.cap)
        if self.run(first, "fit") == "oom":  # not even the larger fit size: the smaller ones, as ``fitted`` does
            self.fitted()
            return
        prior = self._prior(first)
        if prior is None:
            self.fitted()
            return
        self.estimated(prior)

    def _prior(self, first: int) -> SearchLine | None:
        """The line to predict from: the estimate's slope through the first probe's measured figure (which holds
        what the estimate cannot know: the runtime, the libraries, the allocator's pools). None, with the reason in
        ``estimate_note``, where the probe brought no usable estimate."""
        asked = [p for p in self.probes if p.estimate_mib or p.estimate_note]
        if not asked:
            self.estimate_note = "no estimate asked for"
            return None
        carrier = asked[0]
        self.estimate = estimate_line(carrier.estimate_mib)
        anchor = self.points().get(first)
        if self.estimate is None or anchor is None:
            self.estimate_note = carrier.estimate_note or (
                "the estimate's slope is not positive" if anchor is not None else
                f"the probe at batch {first} measured no figure to anchor the estimate to")
            return None
        slope = self.estimate.b_mib_per_sample
        return SearchLine(a_mib=anchor - slope * first, b_mib_per_sample=slope)

    def estimated(self, prior: SearchLine) -> None:
        """The size the estimate predicts, less ``ESTIMATE_HEDGE`` of it (a right or a little-high estimate fits
        there), then the guided search with a line from probes near the boundary (:meth:`_estimated_fit`). Where that
        size runs out of memory the estimate was low: one probe at ``ESTIMATE_FALLBACK`` of it gives the line a second
        point with a long lever (and the first guided probe aims below the line's boundary, as ``up`` does; above a
        censored figure it steps up from there rather than bisect up to the failed prediction); where that fails too,
        the estimate is dropped and the search fits its line from small probes (:meth:`fitted`: batch 1 then, beside
        16). From the predicted size on, every probe trains the confirm length where ``probe_is_confirm`` (so the one
        that becomes the answer is its own confirm run: :meth:`confirm`). An estimate changes where the search probes
        and how long, never what it accepts as the answer."""
        self.fit = prior
        self.predicted = prior.predict_batch(self.calibrated_budget(prior))
        if self.capped:  # the first probe was at --max-batch-cap and fitted: no size is left to predict (probing the
            # cap again was a worker started for nothing: issue 42 saw `--max-batch-cap 1` take 3 workers, not 2)
            self.estimate_note = "not needed: the first size probed was the cap, and it fitted"
            return
        target, _ = self._target(prior, 0)
        target = min(target, max(self.lo + 1, math.floor(self.predicted * (1.0 - ESTIMATE_HEDGE))))
        # from here any probe may become the answer: each trains the confirm length (where the boundary repeats)
        self.long_probes = self.s.probe_is_confirm
        if self.run(self._inside(target), "predicted") == "ok":
            self.estimate_note = "used: the first size probed near the boundary"
            self.prior_slope, self.anchor = prior.b_mib_per_sample, min(self.ok)
            self.guided()
            return
        self.estimate_fail = self.hi
        for fraction in ESTIMATE_FALLBACK:
            below = self.res.snap(int(min(target, self.hi or target) * fraction))
            if self.lo < below < (self.hi or below + 1) and self.run(below, "predicted") == "ok":
                self.estimate_note = "used; its size ran out of memory, the line came from a probe below it"
                self.below_estimate_fail = True
                self.guided()
                return
        self.estimate_note = (f"dropped: more than {ESTIMATE_MAX_ERROR:.0%} low (its size and one "
                              f"{ESTIMATE_MAX_ERROR:.0%} below ran out of memory)")
        self.fit = None
        self.long_probes = False  # small probes from here, as ``fitted``'s: the answer gets a confirm run of its own
        self.fitted()

    def fitted(self) -> None:
        """``fitted``: small fit probes, an optional third one, then the guided search."""
        for batch in sorted(set(self.s.fit_batches)):  # any not probed yet: after model's 16, 1 is a second point
            if batch in self.ok or (self.hi is not None and batch >= self.hi) or batch > self.cap:
                continue
            if self.run(batch, "fit") == "oom":
                break
        if self.lo == 0:
            return
        fit = self.refit()
        if fit is not None and self.hi is None:
            third = self.res.snap(fit.predict_batch(self.calibrated_budget(fit)) * 3 // 4)
            if third > 2 * self.lo and third <= self.cap:  # far extrapolation: shorten the lever
                self.run(third, "fit")
        self.guided()

    def confirm(self, search_again: Callable[[], None]) -> None:
        """Run the answer again for longer; if that runs out of memory, search below it and confirm again.

        Where the answer's own probe trained the confirm length already (:attr:`long_probes`, issue 41), that run is
        its confirm run, unless the probes showed the boundary moving between processes (:meth:`own_run_confirms`):
        then a second process confirms it, as for every other answer (issue 43)."""
        while self.lo > 0:
            if self.own_run_confirms():
                return
            if self.run(self.lo, "confirm", confirm=True) == "ok":
                return
            search_again()

    def own_run_confirms(self) -> bool:
        """Whether the answer's own probe counts as its confirm run: it fitted a run of the confirm length, the bracket
        is settled within the resolution, and no probe showed the boundary moving between fresh processes by more than
        that (peaks out of order, a size that fitted and then failed): where it moves, the answer must fit in a second
        process too (issue 43)."""
        if self.lo not in self.long_ok or self.hi is None or self.moved:
            return False
        allowed = self.res.allowed(self.lo)
        return (self.hi - self.lo <= allowed and self.spread_samples() <= allowed
                and self.scatter_samples() <= allowed)

    def scatter_samples(self) -> int:
        """How far, in samples, the search's line misses the fitting sizes it was not drawn through (0: no line, or
        it misses none). Peaks in order can still scatter about the line by more than the resolution, and where they
        do, one process at the answer is not evidence enough: a second one confirms it. Found on a CPU (PyTorch
        tiny_cnn, 0.137 MiB per sample: one size peaked 338.7-339.8 MiB over three fresh processes, ~7 samples where
        1 % is 2-3; docs/maxbatch.md), where every answer now gets a second process anyway
        (``probe_is_confirm`` False); it guards the budgets where the own-probe confirm still applies."""
        if self.fit is None or not self.fit.b_mib_per_sample > 0:
            return 0
        return math.ceil(self._scatter_mib(self.fit) / self.fit.b_mib_per_sample - 1e-9)

    def result(self) -> SearchResult:
        fail = self.first_fail.get(self.hi) if self.hi is not None else None
        spread, samples = self.spread_mib(), self.spread_samples()
        note = ""
        if self.hi is not None and self.lo and self.hi - self.lo > self.res.allowed(self.lo):
            seen = [f"the peaks of fresh processes moved by {spread:.1f} MiB"] if spread else []
            if self.moved:
                seen.append(f"{', '.join(map(str, sorted(set(self.moved))))} fitted in one process and ran out of "
                            "memory in the next")
            note = (f"stopped at the process-to-process spread ({samples} sample(s)), not at resolution "
                    f"{self.res.label}: {' and '.join(seen)}, so sizes from {self.lo + 1} to {self.hi - 1} cannot be "
                    f"told apart by probing; {self.lo} fitted, its confirm run too, and {self.hi} ran out of memory")
        return SearchResult(strategy=self.s.strategy, max_batch=self.lo, first_fail=fail, probes=tuple(self.probes),
                            fit=self.fit, capped=self.capped, resolution=self.res, spread_mib=spread,
                            spread_samples=samples, note=note, estimate=self.estimate, predicted_batch=self.predicted,
                            estimate_note=self.estimate_note, fit_source=self.fit_source())


def search(probe: ProbeFn, settings: SearchSettings, progress: Progress | None = None) -> SearchResult:
    """Find the largest batch that fits, to ``settings.resolution``, with ``settings.strategy``; every probe goes
    through ``probe``, and ``progress`` (when given) hears of each with the bracket it left.

    Raises:
        SearchAborted: a probe failed twice for a reason other than memory.
    """
    state = _Search(probe, settings, progress)
    if settings.strategy == "model":
        state.model()
        state.confirm(state.guided)
    elif settings.strategy == "fitted":
        state.fitted()
        state.confirm(state.guided)
    else:
        state.run(1, "double")
        state.bisect()
        state.confirm(state.bisect)
    return state.result()
