"""A sweep's trials as independent chains, the unit of parallelism (issue 23).

A chain is one (framework, variant, repeat, purpose) over its batch sizes in ascending order. Within a chain the
order matters: once a size runs out of memory, the larger sizes of that chain are recorded as skipped instead of
being run into the same wall. Between chains nothing is shared, so chains may run at the same time, on different
GPUs or nodes (:mod:`harness.run.scheduler`).

Pure: no executor, no store; the planner's order goes in, chains come out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.config.trial import TrialSpec

#: what identifies a chain: (framework, variant, repeat, purpose)
ChainKey = tuple[str, str, int, str]


def chain_key(trial: TrialSpec) -> ChainKey:
    """The chain ``trial`` belongs to."""
    return (trial.framework, trial.variant, trial.repeat, trial.purpose)


@dataclass(frozen=True)
class Chain:
    """One chain: its key and its trials, smallest batch size first."""

    key: ChainKey
    trials: tuple[TrialSpec, ...]


def split_chains(trials: Iterable[TrialSpec]) -> list[Chain]:
    """The chains of ``trials`` (in the planner's order): chains in the order of their first trial, each chain's
    trials by ascending batch size (stable: trials of one size keep their order)."""
    by_key: dict[ChainKey, list[TrialSpec]] = {}
    for trial in trials:
        by_key.setdefault(chain_key(trial), []).append(trial)
    return [Chain(key, tuple(sorted(ts, key=lambda t: t.batch_size))) for key, ts in by_key.items()]


def doomed_reason(limit: int) -> str:
    """The reason stored with a trial skipped because a smaller size of its chain ran out of memory."""
    return (f"larger than batch size {limit}, which ran out of memory (run with --no-skip-larger to try it "
            "anyway)")


def oom_limits(rows: Iterable[Mapping[str, object]]) -> dict[ChainKey, int]:
    """The smallest out-of-memory batch size per chain among stored trial rows (``--resume``: what was learnt
    before still dooms the larger sizes of that chain)."""
    out: dict[ChainKey, int] = {}
    for row in rows:
        if row.get("status") != "oom":
            continue
        key = (str(row["framework"]), str(row.get("variant") or ""), int(row.get("repeat") or 0),  # type: ignore[call-overload]
               str(row.get("purpose") or "sweep"))
        size = int(row["batch_size"])  # type: ignore[call-overload]
        out[key] = min(out.get(key, size), size)
    return out
