"""How ``make test`` spreads the suite over two pytest-xdist workers (``-n 2 --dist loadfile``, this module's
scheduler), and keeps the tests that must not share the machine apart.

Most of the suite's time is frameworks starting in subprocesses, each on one core, so two workers keep both cores
busy. Three rules, none a list of tests:

* **Units stay whole.** A unit is a test module, or the modules listed together in :data:`SHARED_UNITS` (they read
  one session fixture's real run, such as the contract probes): one worker runs all of it, so a module- or
  session-scoped fixture is computed once, as in a serial run. The units are this module's, not xdist's
  ``xdist_group`` marker: with pytest 9.2 and xdist 3.8 that marker is silently ignored (pytest's ``Node.nodeid``
  returns ``str(self._id)`` while xdist appends the group by writing ``item._nodeid``), and the shared runs ran on
  both workers (issue 53). A module that requests a shared fixture without being listed fails the collection
  (:func:`check_units`), and a shared run that starts in a second worker fails its test
  (:func:`tests.helpers.shared.once`), whatever the versions.
* **Largest unit first.** The units are handed out longest first by the durations recorded in
  ``tests/durations.json`` (a test not in the file counts as the median of its kind, slow or not), and a worker
  gets its next unit only when it is about to run out: the longest-processing-time rule, so the two workers end
  close together. ``make test-durations`` rewrites the file from a full run; a stale file only costs balance.
* **``alone`` tests run beside no other framework test.** Timing- and memory-sensitive tests (a step's clock read
  against its weights' read, a process's peak under an OS memory limit) carry ``@pytest.mark.alone``; they take
  an exclusive lock that every ``slow`` test takes shared, so while one runs, the other worker runs only tests
  that start no framework. Code that measures inside a session fixture takes it with :func:`alone_section`.

The scheduler implements xdist's scheduling protocol (``xdist.scheduler.protocol.Scheduling``, returned from the
``pytest_xdist_make_scheduler`` hook) rather than subclassing a scheduler's private methods, which is what broke.
It replaces ``--dist loadfile``, whose units (modules) it keeps; run without this plugin, ``loadfile`` would split
the shared units, and :func:`tests.helpers.shared.once` would fail the run saying so.

Without xdist (a plain ``pytest``) none of this applies: the lock is a no-op.

**The shared units, and the session fixture each shares** (issue 42: an expensive real run once per run, however
many tests read it; a test of each checks the count):

* ``contract``: ``probe`` and ``failing_step_probe`` (tests/contract/conftest.py), one probe per adapter, read by
  tests/contract/test_contract.py, test_legacy_plugin.py and test_broken_adapters.py (the last was never in the
  group: its reference probe ran again in whichever worker took it); checked by
  ``test_the_probe_ran_once_in_this_worker``.
* ``real_search``: ``real_search`` (tests/maxbatch/conftest.py), PyTorch's real max-batch search under 400 MiB,
  read by tests/maxbatch/test_maxbatch.py; checked by ``test_the_shared_real_search_ran_once_in_this_worker``.
* ``framework_sweep``: ``framework_sweep`` (tests/run/conftest.py), each framework's five real trials (evaluation
  points off and on, prefetch off and on, a constant batch and its one-stretch schedule), read by
  tests/run/test_eval_points_frameworks.py, test_prefetch_frameworks.py and test_schedule_frameworks.py; checked by
  ``test_the_shared_sweep_ran_once_in_this_worker``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.shared import RUN_DIR_ENV

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
        base = Path(tempfile.gettempdir()) / f"batchscope-tests-{workerinput['testrunuid']}"
        os.environ[_LOCK_ENV] = f"{base}.lock"
        os.environ[RUN_DIR_ENV] = f"{base}.runs"  # tests.helpers.shared.once: a shared run's marker file
    else:  # a pytest that a test starts (the legacy plugin's suite) inherits the variables: it is not a worker
        os.environ.pop(_LOCK_ENV, None)
        os.environ.pop(RUN_DIR_ENV, None)
        if getattr(config.option, "numprocesses", None) and not getattr(config.option, "testrunuid", None):
            # the controller names the run (xdist's --testrunuid), so that it can remove the run's files at the end
            config.option.testrunuid = uuid.uuid4().hex
    if config.getoption("update_durations"):
        config.pluginmanager.register(_Recorder(config), "batchscope-durations")


def pytest_unconfigure(config: pytest.Config) -> None:
    uid = getattr(config.option, "testrunuid", None)
    if uid and getattr(config, "workerinput", None) is None:
        base = Path(tempfile.gettempdir()) / f"batchscope-tests-{uid}"
        shutil.rmtree(f"{base}.runs", ignore_errors=True)
        for path in (f"{base}.lock", f"{base}.lock.gate"):
            Path(path).unlink(missing_ok=True)


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


# ---------------------------------------------------------------- the units and the scheduler
@dataclass(frozen=True)
class SharedUnit:
    """Modules that read one session fixture's real run: one unit of work, so one worker runs all of them."""

    fixtures: tuple[str, ...]  # the session fixtures whose run is shared (each wraps it in tests.helpers.shared.once)
    modules: tuple[str, ...]  # every test module that requests one of them, relative to the repository's root


#: The shared real runs and the modules reading each (issue 42; issue 53: ``xdist_group`` stopped holding). A test
#: module that requests one of these fixtures without being listed here fails the collection (:func:`check_units`).
SHARED_UNITS: dict[str, SharedUnit] = {
    "contract": SharedUnit(("probe", "failing_step_probe"),
                           ("tests/contract/test_contract.py", "tests/contract/test_legacy_plugin.py",
                            "tests/contract/test_broken_adapters.py")),
    "framework_sweep": SharedUnit(("framework_sweep",),
                                  ("tests/run/test_eval_points_frameworks.py",
                                   "tests/run/test_prefetch_frameworks.py",
                                   "tests/run/test_schedule_frameworks.py")),
    "real_search": SharedUnit(("real_search",), ("tests/maxbatch/test_maxbatch.py",)),
}


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: its shared unit's name (``@contract``), or its module's path."""
    module = _plain(nodeid).split("::", 1)[0]
    for name, unit in SHARED_UNITS.items():
        if module in unit.modules:
            return f"@{name}"
    return module


def check_units(items: list[pytest.Item]) -> dict[str, str]:
    """The tests that request a shared run's fixture from a module not listed with it: nodeid -> what to do."""
    wrong: dict[str, str] = {}
    for item in items:
        module = _plain(item.nodeid).split("::", 1)[0]
        for name, unit in SHARED_UNITS.items():
            used = sorted(set(unit.fixtures) & set(getattr(item, "fixturenames", ())))
            if used and module not in unit.modules:
                wrong[item.nodeid] = (f"{module} requests {', '.join(used)} (the shared run {name!r}) but is not one "
                                      "of its modules in tests/scheduling.py's SHARED_UNITS: add it there, so that "
                                      "one worker runs every reader of that run")
    return wrong


_WRONG_UNIT = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = check_units(items)
    for item in items:
        if item.nodeid in wrong:
            item.stash[_WRONG_UNIT] = wrong[item.nodeid]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test outside its shared run's unit fails before its fixtures run (in a worker, a raise at collection would
    crash it instead of saying why)."""
    message = item.stash.get(_WRONG_UNIT, None)
    if message is not None:
        pytest.fail(message, pytrace=False)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    return LongestFirst(config)


class LongestFirst:
    """xdist's scheduling protocol (``xdist.scheduler.protocol.Scheduling``, what ``pytest_xdist_make_scheduler``
    returns), written here instead of subclassing a scheduler's private methods (issue 53: those changed under
    us). Units are :func:`unit_of`'s; each is handed out whole, longest first by tests/durations.json, when a
    worker is about to run dry, and ``alone`` units first while the other worker runs units that start nothing.

    A worker holds back the last test it was sent until it knows its next one (its fixtures' teardown), so a worker
    with one test pending is about to run dry: only then does it get its next unit."""

    def __init__(self, config: pytest.Config) -> None:
        from xdist.workermanage import parse_tx_spec_config

        self.config = config
        self.numnodes = len(parse_tx_spec_config(config))
        self.collection: list[str] | None = None
        self.queue: dict[str, list[str]] = {}  # unit -> its nodeids, in the order they are handed out
        self.kinds: dict[str, str] = {}
        self.work: dict[Any, dict[str, dict[str, bool]]] = {}  # node -> unit -> nodeid -> done
        self.collections: dict[Any, list[str]] = {}

    # -- the protocol's properties
    @property
    def nodes(self) -> list[Any]:
        return list(self.work)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        return (self.collection_is_completed and not self.queue
                and all(self._pending(units) < 2 for units in self.work.values()))

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(self._pending(units) for units in self.work.values())

    # -- the protocol's methods
    def add_node(self, node: Any) -> None:
        self.work[node] = {}

    def add_node_collection(self, node: Any, collection: Any) -> None:
        self.collections[node] = list(collection)

    def remove_node(self, node: Any) -> str | None:
        units = self.work.pop(node)
        pending = {unit: [n for n, done in tests.items() if not done] for unit, tests in units.items()}
        pending = {unit: ids for unit, ids in pending.items() if ids}
        if not pending:
            return None
        crashed = next(iter(pending.values()))[0]  # the test it was running: the first not done
        for unit, ids in pending.items():  # the rest runs elsewhere (the crashed test is reported by xdist)
            rest = [n for n in ids if n != crashed]
            if rest:
                self.queue[unit] = rest
        for other in self.nodes:
            self._reschedule(other)
        return crashed

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        nodeid = self.collections[node][item_index]
        self.work[node][unit_of(nodeid)][nodeid] = True
        self._reschedule(node)

    def mark_test_pending(self, item: str) -> None:
        raise NotImplementedError("only the worksteal scheduler moves tests between workers")

    def remove_pending_tests_from_node(self, node: Any, indices: Any) -> None:
        raise NotImplementedError("only the worksteal scheduler moves tests between workers")

    def schedule(self) -> None:
        if self.collection is not None:  # a node added later
            for node in self.nodes:
                self._reschedule(node)
            return
        collections = list(self.collections.values())
        if any(c != collections[0] for c in collections[1:]):
            self.config.pluginmanager.get_plugin("terminalreporter").write_line(
                "xdist workers collected different tests: nothing run (tests/scheduling.py)", red=True)
            return
        self.collection = collections[0]
        units: dict[str, list[str]] = {}
        for nodeid in self.collection:
            units.setdefault(unit_of(nodeid), []).append(nodeid)
        self._order(units)
        for node in self.nodes:
            if self.queue:
                self._assign(node)
            else:
                node.shutdown()

    # -- the policy
    def _order(self, units: dict[str, list[str]]) -> None:
        known = load_tests()
        typical = statistics.median(s for s, _ in known.values()) if known else 1.0
        rank = {"fast": 0, "slow": 1, "alone": 2}
        cost: dict[str, float] = {}
        for unit, ids in units.items():
            # a test not in the file yet: the median duration, and taken as slow until recorded
            entries = [known.get(_plain(n), (typical, "slow")) for n in ids]
            cost[unit] = sum(s for s, _ in entries)
            self.kinds[unit] = max((k for _, k in entries), key=lambda k: rank.get(k, 1))
        self.queue = {unit: units[unit] for unit in sorted(units, key=lambda u: -cost[u])}

    def _assign(self, node: Any) -> None:
        # alone units first, while the other worker runs units that start no framework (so the lock makes nobody
        # wait); otherwise the longest unit left
        busy_alone = any(self.kinds[unit] == "alone" for other, units in self.work.items() if other is not node
                         for unit, tests in units.items() if not all(tests.values()))
        wanted = "fast" if busy_alone else "alone"
        unit = next((u for u in self.queue if self.kinds[u] == wanted), next(iter(self.queue)))
        ids = self.queue.pop(unit)
        self.work[node].setdefault(unit, {}).update(dict.fromkeys(ids, False))
        index = {nodeid: i for i, nodeid in enumerate(self.collections[node])}
        node.send_runtest_some([index[n] for n in ids])

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.queue:
            node.shutdown()
            return
        if self._pending(self.work[node]) > 1:
            return
        self._assign(node)

    @staticmethod
    def _pending(units: dict[str, dict[str, bool]]) -> int:
        return sum(not done for tests in units.values() for done in tests.values())
