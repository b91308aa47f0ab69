"""Expensive real runs shared by many tests, counted, so that the sharing cannot silently stop (issues 42 and 53).

A session fixture that runs a real framework (the real max-batch search, a contract probe, a framework's shared
sweep) wraps its work in :func:`once`. The modules reading it are one unit of work (tests/scheduling.py's
``SHARED_UNITS``), so under xdist one worker runs them all. Should the sharing break, the second run fails the test
that caused it, naming the fixture, instead of costing a minute unseen:

* in the same worker (a fixture's scope narrowed, its cache lost): :data:`RUNS` counts per process;
* in another worker of the same run (the units split, as when pytest 9.2 made xdist's ``xdist_group`` a no-op):
  each run leaves a marker file in the folder that the run's workers share (``BATCHSCOPE_TEST_RUN_DIR``, named by
  xdist's testrunuid, tests/scheduling.py), and a run that finds another worker's marker fails. This holds whatever
  the pytest and xdist versions: it reads files, not the scheduler.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: how many times each shared run started in this process (a pytest worker)
RUNS: Counter[str] = Counter()
RUN_DIR_ENV = "BATCHSCOPE_TEST_RUN_DIR"  # tests.scheduling sets it on each xdist worker


def _claim(name: str) -> None:
    """Leave this worker's marker for ``name`` in the run's shared folder; fail if another worker left one."""
    folder = os.environ.get(RUN_DIR_ENV)
    if not folder:  # not under xdist: one process, RUNS sees everything
        return
    me = os.environ.get("PYTEST_XDIST_WORKER", f"pid {os.getpid()}")
    path = Path(folder) / re.sub(r"[^A-Za-z0-9_.\[\]-]", "_", name)
    path.parent.mkdir(parents=True, exist_ok=True)
    mine = path.with_name(f".{path.name}.{os.getpid()}")
    mine.write_text(me)
    try:  # the marker appears with its text in it (a link, not open("x") then a write another worker could outrun)
        os.link(mine, path)
    except FileExistsError:
        other = path.read_text() or "another worker"
        if other == me:
            return  # this process's own marker: RUNS has already judged it
        raise AssertionError(f"the shared run {name!r} started in worker {me} after worker {other} had made it: the "
                             "tests reading it were split between workers, so the run was paid for twice (its "
                             "modules must be one unit: SHARED_UNITS in tests/scheduling.py)") from None
    finally:
        mine.unlink(missing_ok=True)


@contextmanager
def once(name: str) -> Iterator[None]:
    """Count one run of the shared work ``name``; a second in this process, or one in another worker of the same
    test run, is an error saying what broke."""
    RUNS[name] += 1
    if RUNS[name] > 1:
        raise AssertionError(f"the shared run {name!r} started {RUNS[name]} times in this worker: its fixture is no "
                             "longer computed once per session (scope? cache?), so every test reading it pays for a "
                             "real run again (tests/helpers/shared.py)")
    _claim(name)
    yield
