"""How ``make test`` spreads the suite over two pytest-xdist workers (``-n 2 --dist loadgroup``), and keeps the
tests that must not share the machine apart.

Most of the suite's time is frameworks starting in subprocesses, each on one core, so two workers keep both cores
busy. Three rules, none a list of tests:

* **Units stay whole.** A unit is a test module, or every test carrying the same ``xdist_group`` marker (for a
  session fixture that several modules share, such as the contract probes): one worker runs all of it, so a
  module- or session-scoped fixture is computed once, as in a serial run.
* **Largest unit first.** The units are handed out longest first by the durations recorded in
  ``tests/durations.json`` (a test not in the file counts as the median of its kind, slow or not), and a worker
  gets its next unit only when it is about to run out: the longest-processing-time rule, so the two workers end
  close together. ``make test-durations`` rewrites the file from a full run; a stale file only costs balance.
* **``alone`` tests run beside no other framework test.** Timing- and memory-sensitive tests (a step's clock read
  against its weights' read, a process's peak under an OS memory limit) carry ``@pytest.mark.alone``; they take
  an exclusive lock that every ``slow`` test takes shared, so while one runs, the other worker runs only tests
  that start no framework. Code that measures inside a session fixture takes it with :func:`alone_section`.

Without xdist (a plain ``pytest``) none of this applies: the lock is a no-op.

**The groups, and the session fixture each shares** (issue 42: an expensive real run once per worker, however many
tests read it; :mod:`tests.helpers.shared` counts each run and fails a second one in the same worker, and a test of
each group checks the count):

* ``contract``: ``probe`` and ``failing_step_probe`` (tests/contract/conftest.py), one probe per adapter, read by
  tests/contract/test_contract.py and test_legacy_plugin.py; checked by ``test_the_probe_ran_once_in_this_worker``.
* ``real_search``: ``real_search`` (tests/maxbatch/conftest.py), PyTorch's real max-batch search under 400 MiB,
  read by the boundary and strategy tests of tests/maxbatch/test_maxbatch.py; checked by
  ``test_the_shared_real_search_ran_once_in_this_worker``.
* ``framework_sweep``: ``framework_sweep`` (tests/run/conftest.py), each framework's three real trials (evaluation
  points off and on, prefetch off and on), read by tests/run/test_eval_points_frameworks.py and
  test_prefetch_frameworks.py; checked by ``test_the_shared_sweep_ran_once_in_this_worker``.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

DURATIONS_FILE = Path(__file__).with_name("durations.json")
_LOCK_ENV = "BATCHSCOPE_TEST_LOCK"  # set on the xdist workers: the path of this run's lock file


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-durations", action="store_true", default=False,
                     help="write each test's duration (setup + call + teardown) to tests/durations.json, which "
                          "orders the work of `make test`'s xdist workers, largest unit first")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "alone: timing- or memory-sensitive; under xdist it runs beside no other "
                                       "`slow` test (tests/scheduling.py)")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        os.environ[_LOCK_ENV] = str(Path(tempfile.gettempdir()) / f"batchscope-tests-{workerinput['testrunuid']}.lock")
    else:  # a pytest that a test starts (the legacy plugin's suite) inherits the variable: it is not a worker
        os.environ.pop(_LOCK_ENV, None)
    if config.getoption("update_durations"):
        config.pluginmanager.register(_Recorder(config), "batchscope-durations")


# ---------------------------------------------------------------- the lock between alone and slow tests
@contextmanager
def _locked(exclusive: bool) -> Iterator[None]:
    path = os.environ.get(_LOCK_ENV)
    if not path:  # not under xdist: nothing runs beside this test
        yield
        return
    # Two locks so an exclusive waiter is not starved by the other worker's stream of shared takers: a shared
    # taker passes the gate (held exclusively by a waiting alone test) before it takes the main lock shared.
    with open(path + ".gate", "a") as gate, open(path, "a") as main:
        fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)


def alone_section() -> Any:
    """``with alone_section(): ...``: run a measurement (in a session fixture, say) beside no other slow test."""
    return _locked(exclusive=True)


@pytest.fixture(autouse=True)
def _alone_or_shared(request: pytest.FixtureRequest) -> Iterator[None]:
    node = request.node
    kind = kind_of(node.keywords)
    if kind == "fast":
        yield
        return
    t0 = time.monotonic()
    with _locked(exclusive=kind == "alone"):
        # the wait is not the test's own time: the recorder leaves it out of tests/durations.json
        node.user_properties.append(("lock_wait_s", time.monotonic() - t0))
        yield


def kind_of(keywords: Any) -> str:
    """A test's kind from its markers: ``alone``, ``slow`` (starts a real framework) or ``fast``."""
    return "alone" if "alone" in keywords else "slow" if "slow" in keywords else "fast"


# ---------------------------------------------------------------- recorded durations
class _Recorder:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, list[Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = _plain(report.nodeid)
        waited = sum(float(v) for k, v in report.user_properties if k == "lock_wait_s") if report.when == "setup" \
            else 0.0
        entry = self.tests.setdefault(nodeid, [0.0, kind_of(report.keywords)])
        entry[0] += max(0.0, report.duration - waited)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if getattr(self.config, "workerinput", None) is not None:
            return  # the controller writes (it sees every worker's reports)
        # a module this run ran whole is written as it ran (a test renamed or removed there leaves no entry); the
        # others keep their entries while their file exists, so a run of part of the suite updates that part (a run
        # filtered by -k, -m or a test's id ran only part of its modules: it replaces the entries it has, no more)
        opt = self.config.option
        filtered = bool(opt.keyword or opt.markexpr or any("::" in a for a in self.config.args))
        ran = set() if filtered else {nodeid.split("::")[0] for nodeid in self.tests}
        root = Path(str(self.config.rootpath))
        tests = {nodeid: [s, kind] for nodeid, (s, kind) in load_tests().items()
                 if nodeid.split("::")[0] not in ran and (root / nodeid.split("::")[0]).is_file()}
        tests.update({nodeid: [round(s, 2), kind] for nodeid, (s, kind) in self.tests.items()})
        lines = (f"{json.dumps(nodeid)}: {json.dumps(entry)}" for nodeid, entry in sorted(tests.items()))
        DURATIONS_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")


def _plain(nodeid: str) -> str:
    """The nodeid without the ``@group`` that loadgroup appends."""
    return nodeid.split("@")[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def load_tests() -> dict[str, tuple[float, str]]:
    """nodeid -> (seconds, kind), kind being ``alone``, ``slow`` or ``fast``, from tests/durations.json."""
    try:
        raw = json.loads(DURATIONS_FILE.read_text())
        return {str(k): (float(v[0]), str(v[1])) for k, v in raw.items()}
    except (OSError, ValueError, TypeError, IndexError, KeyError):
        return {}


# ---------------------------------------------------------------- the scheduler
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class LongestFirst(LoadGroupScheduling):  # type: ignore[misc]
        """loadgroup with module units, ordered by recorded duration, each handed out when a worker runs dry."""

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.split("@")[-1]
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            if not hasattr(self, "_cost"):  # the base class has just built its queue in collection order
                self._measure_units()
            # alone units first, while the other worker runs units that start no framework (so the lock makes
            # nobody wait); otherwise the longest unit left
            busy_alone = any(self._kinds[scope] == "alone" for other, units in self.assigned_work.items()
                             if other is not node for scope, done in units.items() if not all(done.values()))
            queue = list(self.workqueue)
            wanted = "fast" if busy_alone else "alone"
            scope = next((s for s in queue if self._kinds[s] == wanted), queue[0])
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(n) for n, done in work_unit.items() if not done])

        def _measure_units(self) -> None:
            known = load_tests()
            typical = statistics.median(s for s, _ in known.values()) if known else 1.0
            self._cost: dict[str, float] = {}
            self._kinds: dict[str, str] = {}
            rank = {"fast": 0, "slow": 1, "alone": 2}
            for scope, ids in self.workqueue.items():
                # a test not in the file yet: the median duration, and taken as slow until recorded
                entries = [known.get(_plain(n), (typical, "slow")) for n in ids]
                self._cost[scope] = sum(s for s, _ in entries)
                self._kinds[scope] = max((k for _, k in entries), key=lambda k: rank.get(k, 1))
            for scope in sorted(self.workqueue, key=lambda sc: -self._cost[sc]):
                self.workqueue.move_to_end(scope)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # a worker holds back its last test until it knows the next one (for fixture teardown), so one
            # pending test means it is about to run dry: only then does it get the next unit
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    config.option.loadscopereorder = False
    return LongestFirst(config, log)
