"""The max-batch search against simulated memory laws: probes to the answer and the answer's error.

    PYTHONPATH=. python benchmarks/maxbatch_sim.py [--check]

Runs the real search code (:func:`harness.maxbatch.search.search`) against memory laws, with no worker and no
framework, and prints one JSON line per law and strategy: ``{"law", "strategy", "probes", "error_pct", "answer",
"truth", ...}``. A law is a family of instances (budgets, slopes, noise seeds); ``probes`` and ``error_pct`` are the
worst over them (``probes_mean`` the mean), ``answer``/``truth`` those of the instance with the most probes. The
confirm run counts as a probe. Goal (issue 31): the default strategy within ``GOAL_PROBES`` probes and
``GOAL_ERROR_PCT`` % of the true boundary on every law of ``GOAL_LAWS``; ``--check`` exits 1 when it is missed.

Laws:

* ``linear``: a + b·batch MiB, measured exactly (CPU's VmData under RLIMIT_DATA is such a figure).
* ``h100``: PyTorch deep_cnn on an H100 under ``--memory-limit-mib 6144`` (issue 31): the reserved MiB measured
  at nine sizes (interpolated between them, extrapolated from the nearest two outside), every size >= 2631 out of
  memory; only the reserved figure is reported, censored near the budget.
* ``pool``: JAX/XLA's BFC pool: what is in use grows a + b·batch and is reported (``peak_bytes_in_use``), the pool
  grows by regions that double until the budget; a batch needs 2 % more than it uses (fragmentation).
* ``pool-figure``: the same pool where only the pool's size is reported (no allocated figure): a staircase that
  says nothing about the boundary, so the search degrades to growing steps and bisection. A stress law, outside
  the goal (every GPU adapter reports an allocated peak).
* ``alloc-frag``: a caching allocator under a cap (PyTorch-like, modelled): the allocated peak reported, the
  reserved one saturating under the cap, and a failure 5 % before the allocated line reaches the cap (fragmentation
  seen only in failures). A stress law, outside the goal: what the failures hide costs bisection over it.
* ``cpu-noise``: tiny_cnn on CPU (290 + 0.5·batch MiB under 520 MiB), each measured peak off by up to ±3 MiB
  (a fresh process's arenas), twenty seeds.
* ``moving`` (stress, issue 43): the same model under glibc's defaults, where the boundary itself moves between
  processes: each fresh process needs 290 + 0.5·batch MiB plus its own offset of up to ±``MOVING_MIB`` (tens of MiB),
  and its peak (what RLIMIT_DATA counts) says so. A size near the boundary fits in one process and fails in the
  next, so no search can resolve it below that spread; the search must see it, say so and stop within
  ``MOVING_PROBES`` probes, even when asked for ``exact``. The truth is the boundary of a process without offset.
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from harness.maxbatch.probes import estimate_batches
from harness.maxbatch.search import (
    CPU_RESOLUTION,
    GPU_CENSOR_PCT,
    GPU_RESOLUTION,
    ProbeResult,
    Resolution,
    SearchResult,
    SearchSettings,
    search,
)

GOAL_PROBES = 8
#: issue 41: the estimate errors simulated (the estimate's MiB per sample off by this fraction: -0.2 is 20 % low, so
#: it predicts a size 25 % too large), and the goal for those within 20 %
ESTIMATE_ERRORS = (0.0, -0.05, 0.05, -0.2, 0.2, -0.5, 0.5)
ESTIMATE_GOAL_PROBES = 6
GOAL_ERROR_PCT = 1.0
#: the laws of the goal (issue 31); ``pool-figure`` and ``alloc-frag`` are stress laws beside them (module docstring)
GOAL_LAWS = ("linear", "h100", "pool", "cpu-noise")
#: issue 31: PyTorch deep_cnn, H100, --memory-limit-mib 6144: batch -> reserved MiB; every size >= 2631 failed
H100_RESERVED_MIB = {727: 1785.0, 1714: 4032.0, 1875: 4398.0, 2042: 4780.0, 2184: 5101.0, 2241: 5232.0,
                     2268: 5298.0, 2300: 5368.0, 2527: 5885.0}
H100_FIRST_OOM = 2631
H100_BUDGET_MIB = 6144.0
#: the ``moving`` law: how far (± MiB) a fresh process's need moves from the law's line (issue 43 saw peaks at
#: neighbouring sizes 534-599 MiB), and the most probes a search of it may take at any resolution, confirm runs
#: included (tests/maxbatch/test_maxbatch_sim.py)
MOVING_MIB = 30.0
MOVING_PROBES = 24


@dataclass(frozen=True)
class Law:
    """One instance of a memory law: whether a size fits, and what its probe reports."""

    name: str
    budget_mib: float
    fits: Callable[[int], bool]
    report: Callable[[int, random.Random], tuple[float | None, float | None]]  # (peak in budget units, growth)
    gpu: bool
    #: > 0: the boundary moves between processes by up to this many MiB either way; ``need`` is then the MiB a
    #: process without offset needs, each probe draws its offset, and its peak (what the budget counts) includes it
    moves_mib: float = 0.0
    need: Callable[[int], float] | None = None
    #: the true MiB per sample near the boundary: what a framework's estimate would say with no error (issue 41)
    slope_mib: float = 0.0

    def truth(self, cap: int = 1 << 20) -> int:
        """The largest size that fits (the laws are monotone), by galloping then bisecting."""
        lo, hi = 0, 1
        while hi <= cap and self.fits(hi):
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.fits(mid) else (lo, mid)
        return lo


def interpolate(points: dict[int, float], batch: int) -> float:
    """Piecewise linear through ``points``, extended from the nearest two at either end."""
    xs = sorted(points)
    i = min(max(bisect.bisect_left(xs, batch), 1), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    return points[x0] + (points[x1] - points[x0]) * (batch - x0) / (x1 - x0)


def h100() -> Law:
    """The issue's measured points: reserved MiB, the first failing size, the budget."""
    def fits(b: int) -> bool:
        return b < H100_FIRST_OOM and interpolate(H100_RESERVED_MIB, b) <= H100_BUDGET_MIB
    top = sorted(H100_RESERVED_MIB)[-2:]  # the measured slope nearest the boundary
    slope = (H100_RESERVED_MIB[top[1]] - H100_RESERVED_MIB[top[0]]) / (top[1] - top[0])
    return Law("h100", H100_BUDGET_MIB, fits, lambda b, rng: (interpolate(H100_RESERVED_MIB, b), None), gpu=True,
               slope_mib=slope)


def linear(a: float, per_sample: float, budget: float) -> Law:
    """a + b·batch, measured exactly."""
    return Law("linear", budget, lambda b: a + per_sample * b <= budget, lambda b, rng: (a + per_sample * b, None),
               gpu=False, slope_mib=per_sample)


def pool(a: float, per_sample: float, budget: float, allocated: bool, region_mib: float = 64.0,
         fragmentation: float = 0.02) -> Law:
    """A BFC pool: regions doubling from ``region_mib`` until the budget; in use a + b·batch, needing
    ``fragmentation`` more; ``allocated``: the in-use peak is reported beside the pool."""
    def size(need: float) -> float:
        total, region = 0.0, region_mib
        while total < need:
            total, region = min(budget, total + region), region * 2
            if total >= budget:
                break
        return total

    def report(b: int, rng: random.Random) -> tuple[float | None, float | None]:
        use = a + per_sample * b
        return size(use * (1 + fragmentation)), (use if allocated else None)

    return Law("pool" if allocated else "pool-figure", budget,
               lambda b: (a + per_sample * b) * (1 + fragmentation) <= budget, report, gpu=True, slope_mib=per_sample)


def caching_allocator(a: float, per_sample: float, budget: float, fragmentation: float = 0.05,
                      cache: float = 0.15) -> Law:
    """PyTorch's caching allocator under a cap, as modelled here (not measured): allocated a + b·batch reported,
    reserved 15 % above it plus 30 MiB until it fills the cap (then it frees its cache and stays under it); a size
    fails when what it allocates, ``fragmentation`` more, passes the cap. The fragmentation is seen only in failures."""
    def report(b: int, rng: random.Random) -> tuple[float | None, float | None]:
        use = a + per_sample * b
        return min(budget - 1.0, use * (1 + cache) + 30.0), use

    return Law("alloc-frag", budget, lambda b: (a + per_sample * b) * (1 + fragmentation) <= budget, report, gpu=True,
               slope_mib=per_sample)


def cpu_noise(noise_mib: float = 3.0) -> Law:
    """tiny_cnn on CPU, each measured peak off by up to ``noise_mib`` (the truth is not)."""
    return Law("cpu-noise", 520.0, lambda b: 290.0 + 0.5 * b <= 520.0,
               lambda b, rng: (290.0 + 0.5 * b + rng.uniform(-noise_mib, noise_mib), None), gpu=False, slope_mib=0.5)


def moving(spread_mib: float = MOVING_MIB) -> Law:
    """tiny_cnn on CPU under glibc's defaults: each fresh process needs up to ``spread_mib`` more or less."""
    def need(b: int) -> float:
        return 290.0 + 0.5 * b

    return Law("moving", 520.0, lambda b: need(b) <= 520.0, lambda b, rng: (need(b), None), gpu=False,
               moves_mib=spread_mib, need=need, slope_mib=0.5)


def laws() -> Iterator[tuple[str, list[Law]]]:
    """Every law's family of instances."""
    yield "linear", [linear(a, s, budget) for a, s, budget in
                     ((300.0, 7.3, 8000.0), (1200.0, 0.91, 8000.0), (900.0, 23.0, 8000.0), (290.0, 0.5, 520.0))]
    yield "h100", [h100()]
    yield "pool", [pool(a, s, budget, True) for a, s, budget in
                   ((250.0, 2.3, 6144.0), (900.0, 11.0, 30000.0), (400.0, 0.7, 12000.0))]
    yield "pool-figure", [pool(a, s, budget, False) for a, s, budget in
                          ((250.0, 2.3, 6144.0), (900.0, 11.0, 30000.0), (400.0, 0.7, 12000.0))]
    yield "cpu-noise", [cpu_noise()] * 20
    yield "alloc-frag", [caching_allocator(a, s, budget) for a, s, budget in
                         ((130.0, 2.0, 6144.0), (900.0, 11.0, 30000.0), (400.0, 0.7, 12000.0))]
    yield "moving", [moving()] * 20


def simulate(law: Law, strategy: str, seed: int, resolution: Resolution | None = None,
             estimate_error: float | None = None) -> tuple[int, int]:
    """One search of ``law``: (probes, answer)."""
    result = simulate_search(law, strategy, seed, resolution, estimate_error=estimate_error)
    return result.probes_n, result.max_batch


def simulate_search(law: Law, strategy: str, seed: int, resolution: Resolution | None = None,
                    cap: int = 1 << 20, estimate_error: float | None = None) -> SearchResult:
    """One search of ``law`` under ``resolution`` (the law's device default) and ``cap``: its result.

    ``estimate_error`` (issue 41): the first probe brings a framework estimate whose MiB per sample is the law's own
    times (1 + the error) (-0.2: 20 % low, so the size it predicts is too large); None: no estimate (as TensorFlow's
    and MXNet's probes, and the ``fitted`` strategy)."""
    rng = random.Random(seed)
    asked = [estimate_error is not None and law.slope_mib > 0]

    def probe(batch: int, confirm: bool) -> ProbeResult:
        result = _probe(batch)
        if asked[0]:  # the search's first probe carries the estimate, as WorkerProber's does
            asked[0] = False
            per_sample = law.slope_mib * (1.0 + float(estimate_error or 0.0))
            result = replace(result, estimate_mib=tuple((b, 50.0 + per_sample * b) for b in estimate_batches(batch)))
        return result

    def _probe(batch: int) -> ProbeResult:
        if law.moves_mib and law.need is not None:  # a fresh process: its own offset decides, and its peak shows it
            need = law.need(batch) + rng.uniform(-law.moves_mib, law.moves_mib)
            if need > law.budget_mib:
                return ProbeResult(batch, "oom", reason="out of memory (simulated)")
            return ProbeResult(batch, "ok", peak_mib=need)
        if not law.fits(batch):
            return ProbeResult(batch, "oom", reason="out of memory (simulated)")
        peak, growth = law.report(batch, rng)
        return ProbeResult(batch, "ok", peak_mib=peak, growth_mib=growth)

    settings = SearchSettings(strategy=strategy, budget_mib=law.budget_mib, max_batch_cap=cap,
                              resolution=resolution or (GPU_RESOLUTION if law.gpu else CPU_RESOLUTION),
                              censor_pct=GPU_CENSOR_PCT if law.gpu else 0.0,
                              spread_from_peaks=not law.gpu,  # a CPU law's peak is what its budget counts
                              expect_estimate=asked[0],
                              # as WorkerProber's settings do: the answer's own probe is its confirm run on a GPU budget
                              # only; a CPU answer is confirmed in a second process (a real CPU boundary moves between
                              # fresh processes by more than 1 %, even where a law here repeats: docs/maxbatch.md)
                              probe_is_confirm=law.gpu)
    return search(probe, settings)


def table(resolution: Resolution | None = None, estimates: bool = True) -> list[dict[str, object]]:
    """One row per law and strategy (see the module's docstring); with ``estimates``, also one per law and estimate
    error in ESTIMATE_ERRORS (strategy ``model+estimate``, ``estimate_error_pct`` the error: -20 = 20 % low)."""
    rows: list[dict[str, object]] = []
    runs_of = [(s, None) for s in ("model", "double-bisect")]
    runs_of += [("model+estimate", e) for e in ESTIMATE_ERRORS] if estimates else []
    for name, family in laws():
        for strategy, error in runs_of:
            runs = []
            for seed, law in enumerate(family):
                probes, answer = simulate(law, strategy.removesuffix("+estimate"), seed, resolution, error)
                truth = law.truth()
                runs.append((probes, answer, truth, (truth - answer) / truth * 100.0 if truth else 0.0))
            worst = max(runs, key=lambda r: r[0])
            res = resolution or (GPU_RESOLUTION if family[0].gpu else CPU_RESOLUTION)
            rows.append({"law": name, "strategy": strategy, "probes": worst[0],
                         "error_pct": round(max(r[3] for r in runs), 3), "answer": worst[1], "truth": worst[2],
                         "probes_mean": round(sum(r[0] for r in runs) / len(runs), 2), "instances": len(runs),
                         "resolution": res.label,
                         "estimate_error_pct": None if error is None else round(error * 100.0)})
    return rows


def estimate_goal_misses(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Issue 41's goal, per row that misses it: an estimate up to 20 % off takes at most ESTIMATE_GOAL_PROBES probes,
    one 50 % off no more than ``model`` without an estimate (the fitted line), on the laws of GOAL_LAWS."""
    plain = {r["law"]: int(r["probes"]) for r in rows if r["strategy"] == "model"}  # type: ignore[call-overload]
    misses = []
    for r in rows:
        if r["strategy"] != "model+estimate" or r["law"] not in GOAL_LAWS:
            continue
        off = abs(int(r["estimate_error_pct"]))  # type: ignore[call-overload]
        bound = ESTIMATE_GOAL_PROBES if off <= 20 else plain[str(r["law"])]
        if int(r["probes"]) > bound:  # type: ignore[call-overload]
            misses.append(dict(r, bound=bound))
    return misses


def meets_goal(rows: list[dict[str, object]]) -> bool:
    """Whether the default strategy takes at most GOAL_PROBES probes within GOAL_ERROR_PCT on every law."""
    return all(int(r["probes"]) <= GOAL_PROBES and float(r["error_pct"]) <= GOAL_ERROR_PCT  # type: ignore[arg-type]
               for r in rows if r["strategy"] == "model" and r["law"] in GOAL_LAWS)


def main(argv: list[str] | None = None) -> int:
    """Print the table as JSON lines; with --check, exit 1 when the goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 unless the default strategy takes <= "
                        f"{GOAL_PROBES} probes within {GOAL_ERROR_PCT:g} %% on every law")
    parser.add_argument("--granularity", type=Resolution.parse, default=None,
                        help="one resolution for every law (default: 1%% on CPU laws, 8,1%% on GPU laws)")
    parser.add_argument("--no-estimates", action="store_true", help="leave out the rows with an estimate (issue 41)")
    args = parser.parse_args(argv)
    rows = table(args.granularity, estimates=not args.no_estimates)
    for row in rows:
        print(json.dumps(row), flush=True)
    for miss in estimate_goal_misses(rows):  # said, not failed: the goal is the issue's, the check the simulator's
        print(f"estimate goal missed: {miss['law']}, estimate {miss['estimate_error_pct']:+}%: {miss['probes']} "
              f"probes > {miss['bound']}", file=sys.stderr)
    return 1 if args.check and not meets_goal(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
