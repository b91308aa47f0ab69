"""The suite's two tiers (issue 53): ``make test`` and ``make test-all``, and which ``heavy`` tests CI runs.

* **``make test``** (the README's command; what CI runs on every submission): every test but the ``heavy`` ones.
  Every built-in framework really runs in it (its contract probe, its shared real sweep, a real max-batch search,
  in its managed environment), and every framework-free test. A full ``make test`` ends by listing which
  frameworks really ran, and what of each, and fails if a built-in framework missed any of the four
  (:func:`ran`, ``BATCHSCOPE_REQUIRE_FRAMEWORKS``).
* **``make test-all``**: the whole suite, the ``heavy`` tests included: the exhaustive real max-batch searches,
  ``--verify``, the CUDA lock resolutions (the package index's time), Ray with simulated nodes, the chaos soak and
  the GPU check's dry run. They re-check at length what ``make test`` checks briefly.

A heavy test names the code it guards: ``@pytest.mark.heavy("harness/maxbatch/", "adapters/pytorch/")`` (paths
relative to the repository's root; a folder ends with ``/``). Its own module and the ``conftest.py`` files above it
count as guarded too, and so do :data:`EVERYTHING` (a change there may change any test). ``--changed-since REF``
keeps, of the heavy tests, those whose guarded paths a file changed since ``REF`` touches (``git diff REF`` and the
files not committed yet), and deselects the rest; ``--changed-files A,B`` takes the list itself. ``.ci/run`` runs
``make test``, then the heavy tests selected by ``--changed-since`` the commit in ``.ci/test-all-passed`` (the last
commit whose ``make test-all`` passed; CONTRIBUTING.md): so a change to the max-batch search runs the exhaustive
searches before it lands, and keeps running them until a ``make test-all`` passes and is recorded.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

#: files whose change may change any test: every heavy test is selected when one of them changed
EVERYTHING = ("constraints.txt", "tests/conftest.py", "tests/tiers.py", "tests/scheduling.py")
#: the last commit whose `make test-all` passed, relative to the repository's root (CONTRIBUTING.md)
PASSED_FILE = ".ci/test-all-passed"
#: what the real max-batch searches guard (their heavy tests': ``@pytest.mark.heavy(*SEARCH_CODE)``)
SEARCH_CODE = ("harness/maxbatch/", "harness/run/worker/", "harness/monitor/", "adapters/pytorch/", "adapters/base.py",
               "adapters/gpumem.py")
#: what a built-in framework must have really done in a full `make test` (:func:`ran`)
REQUIRED = ("contract probe", "shared sweep", "max-batch search", "environment")
REQUIRE_ENV = "BATCHSCOPE_REQUIRE_FRAMEWORKS"  # set by `make test`: a framework that missed one fails the run
_REQUIRED = pytest.StashKey[str]()  # the controller's BATCHSCOPE_REQUIRE_FRAMEWORKS
_RAN: set[str] = set()  # what ran in this process, where there is no run folder shared by workers (no xdist)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "heavy(*paths): in `make test-all` only; `.ci/run` also runs it when a file "
                                       "under one of the paths it guards changed (tests/tiers.py)")
    if getattr(config, "workerinput", None) is None:
        # read here and taken out of the environment: a pytest that a test starts (the legacy plugin's suite, the
        # dummy suites of tests/test_scheduling.py) would inherit it and fail for running no framework
        config.stash[_REQUIRED] = os.environ.pop(REQUIRE_ENV, "")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batchscope tiers")
    group.addoption("--changed-since", metavar="REF", default=None,
                    help="of the `heavy` tests, keep those guarding a file changed since the commit REF (git diff, "
                         "uncommitted files included; `recorded`: the commit in .ci/test-all-passed); deselect the "
                         "others. A REF git cannot find keeps every heavy test.")
    group.addoption("--changed-files", metavar="PATHS", default=None,
                    help="as --changed-since, from this comma-separated list of changed paths")


# ---------------------------------------------------------------- which heavy tests a change selects
def guarded_paths(item: pytest.Item) -> tuple[str, ...]:
    """The paths a heavy test guards: its marker's, its module, the conftest.py files above it, :data:`EVERYTHING`."""
    marker = item.get_closest_marker("heavy")
    declared = tuple(str(p) for p in marker.args) if marker is not None else ()
    module = item.nodeid.split("::", 1)[0]
    parts = Path(module).parts
    conftests = tuple(str(Path(*parts[:i]) / "conftest.py") for i in range(1, len(parts)))
    return (*declared, module, *conftests, *EVERYTHING)


def touches(guards: Iterable[str], changed: Iterable[str]) -> bool:
    """Whether a changed path is one of ``guards`` or lies under one of them (a folder)."""
    changed = list(changed)
    for guard in guards:
        folder = guard.rstrip("/") + "/"
        if any(path == guard.rstrip("/") or path.startswith(folder) for path in changed):
            return True
    return False


def changed_since(ref: str, root: Path) -> list[str] | None:
    """The files changed since commit ``ref`` (committed or not), or None where git cannot say (then: all)."""
    if ref == "recorded":
        try:
            ref = (root / PASSED_FILE).read_text().split()[0]
        except (OSError, IndexError):
            return None
    try:
        committed = subprocess.run(["git", "diff", "--name-only", f"{ref}", "--"], cwd=root, capture_output=True,
                                   text=True, check=True).stdout
        untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=root,
                                   capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted({line for line in (committed + untracked).splitlines() if line})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("heavy")
        if marker is not None and not marker.args:
            raise pytest.UsageError(f"{item.nodeid} is heavy but guards no path: @pytest.mark.heavy(\"harness/...\")"
                                    " names the code whose change makes CI run it (tests/tiers.py)")
    since, files = config.getoption("changed_since"), config.getoption("changed_files")
    if since is None and files is None:
        return
    root = Path(str(config.rootpath))
    changed = [p.strip() for p in files.split(",") if p.strip()] if files is not None else changed_since(since, root)
    if changed is None:
        _say(config, f"--changed-since {since}: no commit recorded, or one git cannot find here; every heavy test "
                     "is kept")
        return
    keep, drop = [], []
    for item in items:
        heavy = item.get_closest_marker("heavy") is not None
        (drop if heavy and not touches(guarded_paths(item), changed) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _say(config, f"heavy tests: {sum(1 for i in keep if i.get_closest_marker('heavy'))} kept, {len(drop)} left out "
                 f"({len(changed)} file(s) changed{f' since {since}' if since else ''})")


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and getattr(config, "workerinput", None) is None:  # a worker's terminal is not shown
        reporter.write_line(line)


def pytest_report_header(config: pytest.Config) -> str | None:
    """The controller's line (it collects nothing under xdist): what changed, so the log says why the heavy tests
    that ran were kept."""
    since, files = config.getoption("changed_since"), config.getoption("changed_files")
    if since is None and files is None:
        return None
    if files is not None:
        return f"heavy tests kept for the changed files given: {files}"
    changed = changed_since(since, Path(str(config.rootpath)))
    if changed is None:
        what = f"no commit recorded in {PASSED_FILE}, or" if since == "recorded" else "commit"
        return f"--changed-since {since}: {what} one git cannot find here; every heavy test is kept"
    shown = ", ".join(changed[:12]) + (f", ... ({len(changed)} in all)" if len(changed) > 12 else "")
    return f"heavy tests kept where they guard a file changed since {since}: {shown or 'none changed'}"


# ---------------------------------------------------------------- which frameworks really ran
def ran(framework: str, what: str) -> None:
    """Record that ``framework`` really did ``what`` (one of :data:`REQUIRED`) in this test run."""
    from tests.helpers.shared import RUN_DIR_ENV

    folder = os.environ.get(RUN_DIR_ENV)
    if folder:  # under xdist: a file in the folder the run's workers share, read by the controller at the end
        path = Path(folder) / "ran" / f"{framework}--{what.replace(' ', '_')}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        _RAN.add(f"{framework}--{what.replace(' ', '_')}")


def what_ran(folder: Path | None, here: Iterable[str] = ()) -> dict[str, set[str]]:
    """framework -> what it really did in this run (:func:`ran`): the run folder's records and ``here``'s."""
    names = set(here)
    if folder is not None and (folder / "ran").is_dir():
        names |= {p.name for p in (folder / "ran").iterdir()}
    out: dict[str, set[str]] = {}
    for name in names:
        framework, _, what = name.partition("--")
        out.setdefault(framework, set()).add(what.replace("_", " "))
    return out


def missing(ran_: dict[str, set[str]], builtins: Iterable[str]) -> dict[str, list[str]]:
    """Of the built-in frameworks, what each did not really do."""
    return {f: [w for w in REQUIRED if w not in ran_.get(f, set())] for f in builtins
            if any(w not in ran_.get(f, set()) for w in REQUIRED)}


def run_folder(config: pytest.Config) -> Path | None:
    import tempfile

    uid = getattr(config.option, "testrunuid", None)
    return Path(tempfile.gettempdir()) / f"batchscope-tests-{uid}.runs" if uid else None


def builtin_frameworks() -> list[str]:
    from harness import registry

    return sorted(n for n in registry.known_adapter_names() if registry.is_builtin(n))


def required_frameworks(value: str) -> list[str]:
    """The frameworks ``BATCHSCOPE_REQUIRE_FRAMEWORKS`` names: ``all``, or a comma-separated list (the Makefile's
    GPU=1 leaves MXNet out, which has no CUDA build); none where it is empty."""
    value = value.strip()
    if not value:
        return []
    return builtin_frameworks() if value in ("1", "all") else sorted(f.strip() for f in value.split(",") if f.strip())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return
    done = what_ran(run_folder(config), _RAN)
    builtins = builtin_frameworks()
    required = required_frameworks(config.stash.get(_REQUIRED, ""))
    if not done and not required:
        return
    terminalreporter.section("frameworks that really ran (tests/tiers.py)")
    for framework in sorted(set(builtins) | set(done)):
        did = [w for w in REQUIRED if w in done.get(framework, set())]
        terminalreporter.write_line(f"{framework}: {', '.join(did) if did else 'nothing'}")
    lacking = missing(done, required)
    if lacking:
        for framework, what in lacking.items():
            terminalreporter.write_line(f"{framework} did not really run its {', '.join(what)} in this run: `make test`"
                                        " must run every built-in framework (tests/tiers.py)", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if getattr(session.config, "workerinput", None) is not None:
        return
    required = required_frameworks(session.config.stash.get(_REQUIRED, ""))
    lacking = missing(what_ran(run_folder(session.config), _RAN), required)
    if lacking and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
