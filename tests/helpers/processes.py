"""Which tests may start ``batchscope`` in a process of its own, checked where it is started.

``make test-fast`` (the edit-test loop) starts no process of batchscope's: a test whose subject is what a command
prints, writes or exits with calls it in the test process (:mod:`tests.helpers.inprocess`). A test whose subject is
the process itself (a signal, a kill, a broken pipe, an OS limit on it, two commands racing) carries the ``process``
marker and runs in ``make test`` only. Under ``make test-fast`` (``BATCHSCOPE_TEST_FAST`` set), starting one from a
test without that marker (or ``slow``) fails the test, saying so, as the blocked frameworks do for ``slow``.
"""

from __future__ import annotations

import os
from typing import Any

FAST_ENV = "BATCHSCOPE_TEST_FAST"
#: the test running now in this process (set by the autouse fixture in tests/conftest.py)
RUNNING: list[Any] = []


def check_may_start(what: str) -> None:
    """Fail the running test if ``make test-fast`` runs it and it may not start ``what`` in a process of its own."""
    if not os.environ.get(FAST_ENV) or not RUNNING:
        return
    node = RUNNING[-1]
    if "process" in node.keywords or "slow" in node.keywords:
        return
    raise AssertionError(f"{node.nodeid} starts {what} in a process of its own under `make test-fast`: call the "
                         "command in the test process (tests.helpers.inprocess.cli), or, where the process is the "
                         "subject (a signal, a kill, an OS limit), mark the test @pytest.mark.process")
