"""Which tests may start a process of their own, checked where every process is started.

``make test-fast`` (the edit-test loop) starts no process at all (issue 42: "keep the edit-test loop free of process
start-ups"): a test whose subject is what a command prints, writes or exits with calls it in the test process
(:mod:`tests.helpers.inprocess`). A test that starts a process (a worker, even the fake adapter's; ``batchscope`` in
an interpreter of its own; pip building an environment; a lock holder; a mount) carries the ``process`` marker and
runs in ``make test`` only, as does one whose subject is the process itself (a signal, a kill, a broken pipe, an OS
limit on it, two commands racing). Under ``make test-fast`` (``BATCHSCOPE_TEST_FAST`` set) every process start goes
through :func:`check_may_start` (:func:`guard_process_starts` wraps ``subprocess.Popen``), and a start from a test
without that marker (or ``slow``) fails the test, saying so, as the blocked frameworks do for ``slow`` -- also where
the code under test caught the error (the test fails at its teardown, :func:`violations_of`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

FAST_ENV = "BATCHSCOPE_TEST_FAST"
#: the test running now in this process, its fixtures' set-up included (set by tests/conftest.py's hook)
RUNNING: list[Any] = []
#: (test id, message) of each start refused under ``make test-fast``: failed at the test's teardown as well, since
#: code under test may catch the error (an executor records a worker that could not start as the trial's error)
REFUSED: list[tuple[str, str]] = []
#: the shared run being made now (:func:`shared_run`)
_SHARED: list[str] = []


@contextmanager
def shared_run(name: str) -> Iterator[None]:
    """A run that many tests read, made once per worker by a module- or session-scoped fixture (a finished fake
    sweep's store, issue 42 item 1: "real runs shared, assertions many"): its processes may start under
    ``make test-fast`` too, once, instead of marking every test that reads it ``process``."""
    _SHARED.append(name)
    try:
        yield
    finally:
        _SHARED.pop()


def check_may_start(what: str) -> None:
    """Fail the running test if ``make test-fast`` runs it and it may not start ``what`` in a process of its own."""
    if not os.environ.get(FAST_ENV) or not RUNNING or _SHARED:
        return
    node = RUNNING[-1]
    if "process" in node.keywords or "slow" in node.keywords:
        return
    message = (f"{node.nodeid} starts {what} in a process of its own under `make test-fast`: call the command in "
               "the test process (tests.helpers.inprocess.cli), or, where a process is needed (a worker, a "
               "signal, a kill, an OS limit), mark the test @pytest.mark.process")
    REFUSED.append((node.nodeid, message))
    raise AssertionError(message)


def violations_of(nodeid: str) -> list[str]:
    """The starts refused while ``nodeid`` ran, forgotten once read."""
    mine = [m for n, m in REFUSED if n == nodeid]
    REFUSED[:] = [(n, m) for n, m in REFUSED if n != nodeid]
    return mine


def _describe(args: Any) -> str:
    argv = [str(a) for a in args] if isinstance(args, Sequence) and not isinstance(args, (str, bytes)) else [str(args)]
    return " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv[:4]))[:120]


def guard_process_starts() -> None:
    """Every process started in this interpreter passes :func:`check_may_start` first (``make test-fast`` only)."""
    real = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    if getattr(real, "guarded", False):
        return

    def guarded(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
        check_may_start(_describe(args))
        return real(self, args, *rest, **kwargs)

    guarded.guarded = True  # type: ignore[attr-defined]
    subprocess.Popen._execute_child = guarded  # type: ignore[attr-defined]
