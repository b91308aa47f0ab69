"""What the max-batch answer means for the user: the seed's formula, recommended sizes, jitter advice.

Pure functions of numbers and stored rows: the report uses them too, so nothing here may import the
executor, the store or a framework.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.maxbatch.search import SearchLine
from harness.records import ALLOCATOR_VARS as ALLOCATOR_VARS  # re-exported: docs/maxbatch.md names it here
from harness.records import MaxBatchResult, ProbeResult, allocator_env

MIB = 1024.0 * 1024.0


#: how far a fresh worker's CPU peak moves at the same batch under the same limit (measured: whole 1 MiB CPython
#: arenas mapped or not depending on thread timing, in about 1 run in 5; docs/maxbatch.md). An answer with less
#: spare memory than this may fail on a later run: the CLI and the report say so and give a size with a margin.
CPU_PEAK_JITTER_MIB = 3.0

#: where a framework's fresh workers move further than :data:`CPU_PEAK_JITTER_MIB` (measured on PyTorch): JAX's CPU
#: peak at one size moved by up to 6.9 MiB between fresh processes (2026-11-28, fixed mmap threshold, compilation
#: cache off: resnet20 at 92 read 710.0 and 716.9 MiB, at 95 713.9-719.5; deep_cnn at 66 892.5-896.4 over six, and a
#: process either fitted 68 and 69 or neither, 4.2 MiB per sample; docs/maxbatch.md), so a 3 MiB margin left its
#: recommendation failing in three of seven processes. A framework not listed (a plugin's) gets the default
CPU_PEAK_JITTER_MIB_OF = {"jax": 8.0}


def cpu_peak_jitter_mib(framework: str) -> float:
    """How far ``framework``'s fresh CPU worker's peak moves at one size: the margin's floor on CPU."""
    return CPU_PEAK_JITTER_MIB_OF.get(framework, CPU_PEAK_JITTER_MIB)

#: The least a GPU recommendation leaves for run-to-run variation (issue 31), as CPU_PEAK_JITTER_MIB does on CPU.
#: Chosen, not yet measured run to run on a GPU: three of PyTorch's 20 MiB large-pool segments (its caching allocator
#: serves blocks of 1-10 MiB from 20 MiB segments and rounds larger ones to 2 MiB, so one more segment at the
#: boundary is the step a fresh process can take) plus room for a workspace that another cuDNN algorithm choice
#: needs. benchmarks/gpu_check.py is where a measurement should replace it.
GPU_MARGIN_FLOOR_MIB = 64.0

#: Under glibc's default malloc (no MALLOC_* set: how users train, issue 22) the memory a CPU batch needs varies
#: with the heap's history: glibc raises its mmap threshold as large blocks are freed, later blocks land on a heap
#: that fragments, and how much that costs differs from one fresh process to the next and grows over steps. The
#: recommendation first leaves this fraction of the batch's own memory (measured slope x the answer) on top of the
#: jitter and the confirm run's growth; then fresh settling runs lower it by this fraction of itself per failure
#: (harness.maxbatch.probes.settle_heap), since the fitted slope itself cannot be trusted under the default
#: (measured: docs/maxbatch.md, "Under glibc's defaults"). Not applied where the probes ran with a fixed mmap
#: threshold (the "what helps" setting ``--env MALLOC_MMAP_THRESHOLD_=131072``), whose peaks repeat to the MiB.
CPU_HEAP_ALLOWANCE = 0.15


@dataclass(frozen=True)
class Formula:
    """The seed's rule of thumb: (memory − model size) / per-sample size, rounded down to a power of two."""

    model_state_mib: float  # weights + gradients + optimizer state
    per_sample_mib: float
    batch: int  # 0 when the model alone does not fit

    @classmethod
    def compute(cls, param_count: int, optimizer: str, momentum: float, budget_mib: float,
                per_sample_mib: float, bytes_per_float: int = 4) -> Formula:
        """The estimate for ``budget_mib`` with ``per_sample_mib`` of activations per sample."""
        states = 2 if optimizer == "adam" else (1 if momentum > 0 else 0)
        model_mib = param_count * bytes_per_float * (2 + states) / MIB
        raw = (budget_mib - model_mib) / per_sample_mib if per_sample_mib > 0 else 0.0
        return cls(model_mib, per_sample_mib, pow2_at_or_below(int(raw)) if raw >= 1 else 0)

    def error_pct(self, measured: int) -> float | None:
        """How far the formula is from the measured answer, in % of the measured one."""
        return (self.batch - measured) / measured * 100.0 if measured > 0 else None


def pow2_at_or_below(n: int) -> int:
    """The largest power of two <= n (0 for n < 1)."""
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


def recommend(max_batch: int, margin_mib: float, fit: SearchLine | None, fallback_per_sample_mib: float
              ) -> tuple[int, int, int | None]:
    """(recommended batch, power of two at or below it, multiple of 8 at or below it or None).

    The margin is turned into samples with the measured per-sample memory (the fit's slope), so the
    recommendation leaves ``margin_mib`` of the budget unused at the measured boundary.
    """
    per_sample = fit.b_mib_per_sample if fit is not None else fallback_per_sample_mib
    spare = math.ceil(margin_mib / per_sample) if margin_mib > 0 and per_sample > 0 else 0
    batch = max(0, max_batch - spare)
    return batch, pow2_at_or_below(batch), (batch // 8 * 8) or None


def answer_env(probe_env: dict[str, str], parent_env: dict[str, str]) -> dict[str, str]:
    """The allocator settings the probes ran with: what the user must train with for the answer to hold.

    A probe's environment is the parent's plus ``probe_env`` (harness/run/executor.py), so a variable the user
    had set (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``) shaped the answer as much as one the probe set.
    """
    return allocator_env(probe_env, parent_env)


def env_words(env: dict[str, str]) -> str:
    """``env`` as a shell prefix (``K=V K2=V2``), or the words for none."""
    return " ".join(f"{k}={v}" for k, v in env.items()) if env else "(no allocator settings)"


def glibc_heap_varies(budget_kind: str, train_env: dict[str, str]) -> bool:
    """Whether a CPU search ran under glibc's adaptive mmap threshold (no MALLOC_MMAP_THRESHOLD_ fixed)."""
    return budget_kind == "cpu-rlimit-data" and "MALLOC_MMAP_THRESHOLD_" not in train_env


def cap_skips_settling(row: MaxBatchResult) -> bool:
    """Whether a search under glibc's adaptive threshold needs no settling runs because it stopped at
    ``--max-batch-cap`` (no size failed) leaving at least the cap's own peak unused: the process at the cap would have
    to double to run out, which a heap that moves by tens of MiB between processes and over steps cannot do."""
    peak = row.answer.peak_mib
    if not row.answer.capped or peak is None or row.budget_mib is None:
        return False
    return (glibc_heap_varies(row.budget_kind, row.recommendation.train_env or {})
            and float(row.budget_mib) - float(peak) >= float(peak))


@dataclass(frozen=True)
class Margin:
    """Memory the recommendation leaves unused at the measured boundary, from what varied, plus the user's.

    ``jitter_mib``: how far a fresh process's peak at one size moves from run to run: on CPU the larger of the
    framework's :func:`cpu_peak_jitter_mib` (PyTorch's measured over 72 fresh workers, JAX's over today's searches:
    docs/maxbatch.md) and the spread this search saw at one size; on a GPU the larger of GPU_MARGIN_FLOOR_MIB
    (chosen: no run-to-run measurement there yet) and that spread.
    ``growth_mib``: how much more the longer confirm run needed than the short probe at the answer (the heap or a
    caching allocator growing over steps), a sign of more growth to come in a longer run. ``heap_mib``: on CPU under
    glibc's default malloc, CPU_HEAP_ALLOWANCE of the batch's own memory at the answer (0 elsewhere).
    """

    user_mib: float
    jitter_mib: float
    growth_mib: float
    heap_mib: float = 0.0

    @property
    def total_mib(self) -> float:
        """What the recommendation leaves unused at the boundary."""
        return self.user_mib + self.jitter_mib + self.growth_mib + self.heap_mib

    @classmethod
    def measure(cls, probes: Sequence[ProbeResult], answer: int, budget_kind: str, user_mib: float,
                train_env: dict[str, str] | None = None, per_sample_mib: float = 0.0, framework: str = "") -> Margin:
        """From the search's probes: the spread at one size and the growth at ``answer``; with ``per_sample_mib`` (the
        fit's slope), the heap allowance when glibc's threshold was left adaptive; on CPU at least ``framework``'s
        :func:`cpu_peak_jitter_mib`."""
        by_size: dict[tuple[int, bool], list[float]] = {}
        for p in probes:
            if p.status == "ok" and p.peak_mib is not None:
                by_size.setdefault((p.batch, p.confirm), []).append(float(p.peak_mib))
        spread = max((max(v) - min(v) for v in by_size.values()), default=0.0)
        floor = (cpu_peak_jitter_mib(framework) if budget_kind == "cpu-rlimit-data" else
                 GPU_MARGIN_FLOOR_MIB if budget_kind.startswith("gpu") else 0.0)
        jitter = max(spread, floor)
        short, long = by_size.get((answer, False)), by_size.get((answer, True))
        growth = max(0.0, max(long) - max(short)) if short and long else 0.0
        heap = (CPU_HEAP_ALLOWANCE * max(per_sample_mib, 0.0) * answer
                if glibc_heap_varies(budget_kind, train_env or {}) else 0.0)
        return cls(user_mib, jitter, growth, heap)


def answer_headroom_mib(row: MaxBatchResult) -> float | None:
    """The budget minus the largest peak measured at the answer (its probes and confirm run); None if unknown."""
    peaks = [float(p.peak_mib) for p in row.probes.items
             if p.batch == row.answer.max_batch and p.status == "ok" and p.peak_mib is not None]
    if not peaks or row.budget_mib is None:
        return None
    return float(row.budget_mib) - max(peaks)


def jitter_advice(row: MaxBatchResult) -> str | None:
    """A warning and a safer size when a CPU answer has less spare memory than a fresh run's peak moves by.

    None when the answer has room enough, when the user already gave a margin that covers the jitter, or
    where the jitter was not measured (GPU budgets).
    """
    max_batch = row.answer.max_batch
    if row.budget_kind != "cpu-rlimit-data" or not max_batch:
        return None
    jitter = cpu_peak_jitter_mib(str(row.framework or ""))
    if float(row.margin.user_mib or 0.0) + float(row.margin.jitter_mib or 0.0) >= jitter:
        return None  # the recommendation already leaves the jitter (rows since issue 18) or the user asked for it
    spare = answer_headroom_mib(row)
    if spare is None or spare >= jitter:
        return None
    b = row.line.b_mib_per_sample
    fit = SearchLine(float(row.line.a_mib or 0.0), float(b)) if b else None
    safe, _, _ = recommend(int(max_batch), jitter, fit, float(row.formula.analytic_mib_per_sample or 0.0))
    risk = (f"the answer leaves {spare:.1f} MiB of the budget unused, and a fresh worker's peak at one size "
            f"moves by 1-{jitter:g} MiB from run to run on CPU, so {max_batch} may fail on a "
            "later run; ")
    if safe < 1:  # the jitter is worth more samples than the answer has: no size keeps the margin
        return risk + (f"no batch size leaves a margin of {jitter:g} MiB under this budget: give a "
                       f"larger --memory-limit-mib (at least {jitter:g} MiB more)")
    return risk + f"{safe} leaves a margin of {jitter:g} MiB (--margin-mib {jitter:g})"


#: the last entry of a settling (harness.maxbatch.probes.settle_heap) that ran out of rounds (every size ran out of
#: memory), or that a run ending otherwise (timeout, crash, error) stopped: nothing settled, nothing is recommended
NONE_SETTLED = "none settled"
NOT_SETTLED = "not settled"


def settle_stopped(row: MaxBatchResult) -> str | None:
    """Why a search has no recommendation when its settling stopped on a run that did not run out of memory (a
    timeout, a crash: nothing learnt about memory, harness.maxbatch.probes.settle_heap); None otherwise."""
    runs = row.settling.runs
    stopped = [r for r in runs if r.batch and r.status not in ("ok", "oom")]
    if not runs or runs[-1].status != NOT_SETTLED or not stopped:
        return None
    return (f"the settling run at {stopped[-1].batch} ended in {stopped[-1].status}, not out of memory, so "
            "whether it fits is unknown (settling runs train --settle-steps steps, their timeout scaled to match: "
            "raise --timeout-s, or give fewer --settle-steps; each run's log is in the output directory's logs)")


def train_advice(row: MaxBatchResult) -> str | None:
    """How to use the recommendation: the margin it leaves, the settings to train with, the --verify result.

    None for rows stored before these were recorded (no ``margin_total_mib``).
    """
    margin, total = row.margin, row.margin.total_mib
    if total is None:
        return None
    env = row.recommendation.train_env or {}
    rec = row.recommendation.batch
    where = "under the budget" if row.answer.capped else "at the boundary"  # capped: no size failed, so no boundary
    heap = float(margin.heap_mib or 0.0)
    head = (f"recommended {rec} leaves {float(total):.1f} MiB {where} "
            f"(run-to-run jitter {float(margin.jitter_mib or 0):.1f}, growth over the "
            f"{row.probes.confirm_steps or '?'}-step confirm run {float(margin.growth_mib or 0):.1f}, "
            + (f"glibc heap allowance {heap:.1f}, " if round(heap, 1) else "")  # a part that shows as 0.0: left out
            + f"--margin-mib {float(margin.user_mib or 0):g})" if rec else
            f"no recommendation: {stopped}" if (stopped := settle_stopped(row)) else
            f"no size leaves the {float(total):.1f} MiB margin: give a larger budget")
    how = f"; train with {env_words(env)}, as the probes ran" if env else ""
    check = ""
    verified = row.verification
    if verified.status:
        check = (f"; --verify trained it {verified.steps} steps + eval in a fresh worker: "
                 f"{verified.status}" + (f" ({verified.reason})" if verified.reason else ""))
    return head + how + check
