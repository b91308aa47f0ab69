"""Expensive real runs shared by many tests, counted, so that the sharing cannot silently stop (issue 42).

A session fixture that runs a real framework (the real max-batch search, a contract probe, a framework's shared
sweep) wraps its work in :func:`once`. Its tests carry one ``xdist_group`` (tests/scheduling.py lists each group and
the fixture it shares), so under xdist one worker runs them all. Should the sharing break (a fixture's scope
narrowed, its cache lost, a group split over two modules' fixtures), the second run in the same worker fails the
test that caused it, naming the fixture, instead of costing a minute unseen; and a test of each group reads
:data:`RUNS` after its fixture to show it ran exactly once in this worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

#: how many times each shared run started in this process (a pytest worker)
RUNS: Counter[str] = Counter()


@contextmanager
def once(name: str) -> Iterator[None]:
    """Count one run of the shared work ``name``; a second in this process is an error saying what broke."""
    RUNS[name] += 1
    if RUNS[name] > 1:
        raise AssertionError(f"the shared run {name!r} started {RUNS[name]} times in this worker: its fixture is no "
                             "longer computed once per session (scope? cache?), so every test reading it pays for a "
                             "real run again (tests/helpers/shared.py)")
    yield
