"""What the fault tests share: start ``batchscope`` as a user would (its own process, the fake adapter
registered), look at its worker processes through ``/proc``, and read a store without creating one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.errors import StoreError
from harness.store import Store
from tests import ROOT
from tests.faults.launch import ADAPTERS_ENV, RLIMIT_ENV

#: two names for the framework-free fake adapter, so a test can show one framework failing beside another
FAKE_ADAPTERS = "fake=tests.fakes.adapter:FakeAdapter,fake2=tests.fakes.adapter:FakeAdapter"
#: how long a worker may outlive its parent (issue 13: "no more than a second or two")
ORPHAN_GRACE_S = 2.0


def env_for(tmp_path: Path, behaviour: str | None = None, rlimit_data_mib: int | None = None,
            adapters: str = FAKE_ADAPTERS, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``batchscope`` started by a test (``extra``: more variables)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BATCHSCOPE_CACHE=str(tmp_path / "cache"), **(extra or {}))
    env[ADAPTERS_ENV] = adapters
    if behaviour:
        env["BATCHSCOPE_FAKE_BEHAVIOUR"] = behaviour
    if rlimit_data_mib:
        env[RLIMIT_ENV] = str(rlimit_data_mib)
    return env


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.faults.launch", *args]


def bs(tmp_path: Path, *args: str, timeout: float = 300, as_user: bool = False, cwd: Path = ROOT,
       **env_kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``batchscope ARGS`` to completion; ``as_user``: with file permissions applying even to root."""
    return subprocess.run(command(*args), cwd=cwd, env=env_for(tmp_path, **env_kw), capture_output=True,
                          text=True, timeout=timeout, preexec_fn=permissions_apply if as_user else None)


def cli(tmp_path: Path, *args: str, as_user: bool = False, cwd: Path = ROOT, behaviour: str | None = None,
        adapters: str = FAKE_ADAPTERS, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``batchscope ARGS`` called in the test process, with :func:`bs`'s environment and adapters: for a test of
    what a command prints, writes or exits with, where the process is not the subject (no signal, no OS limit)."""
    from tests.helpers.inprocess import cli as in_process

    env = env_for(tmp_path, behaviour, adapters=adapters, extra=extra)
    return in_process(args, env=env, cwd=cwd, adapters=adapters, as_user=as_user)


def interruptible() -> None:
    """``preexec_fn`` for a command a test interrupts: Ctrl-C (SIGINT) back to its default disposition.

    A shell without job control starts background commands with SIGINT ignored, and the ignore is inherited:
    a test suite launched as ``cmd &`` from a script would otherwise send SIGINT to a child that never sees it
    (measured: three Ctrl-C tests timed out that way, and passed run in the foreground).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: Linux capabilities that let root ignore permission bits: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
_FILE_OVERRIDE_CAPS = (1, 2, 3)
_PR_CAPBSET_DROP = 24


def permissions_apply() -> None:
    """``preexec_fn``: a read-only file or directory is read-only to the command, even run as root.

    Tests that make a store read-only with ``chmod`` would see nothing as root (CI containers often run as
    root): root ignores permission bits through three capabilities. Dropped from the bounding set before
    ``exec``, they are gone from the command, which then meets the permissions a user would.
    """
    import ctypes

    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _FILE_OVERRIDE_CAPS:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed: run the tests as a user, not root")


#: the commands :func:`start` started, so tests/faults/conftest.py can kill what a failed test left running (a test
#: that fails before it stops its command would leave it, and its worker, to the tests after it: seen in CI, a
#: hanging probe left by a failed signal test was counted as the chaos soak's orphan at each of its driver kills)
STARTED: list[subprocess.Popen[str]] = []


def start(tmp_path: Path, *args: str, **env_kw: Any) -> subprocess.Popen[str]:
    """Start ``batchscope ARGS`` and return at once (interruptible, whatever this process inherited)."""
    proc = subprocess.Popen(command(*args), cwd=ROOT, env=env_for(tmp_path, **env_kw), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    STARTED.append(proc)
    return proc


def stop_started() -> None:
    """Kill every command :func:`start` started that is still running (its workers follow their parent)."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def fake_experiment(tmp_path: Path, name: str = "faults", **keys: Any) -> Path:
    """A tiny experiment on the fake adapter (no framework starts); ``keys`` override or add TOML keys."""
    base: dict[str, Any] = {"name": name, "frameworks": ["fake"], "model": "tiny_cnn", "dataset": "synthetic",
                            "synthetic_shape": [1, 8, 8], "synthetic_samples": 64, "synthetic_classes": 3,
                            "batch_sizes": [4], "warmup_steps": 1, "timed_steps": 2, "threads": 1,
                            "device": "cpu", "timeout_s": 120, "eval": False}
    base.update(keys)
    lines = []
    for key, value in base.items():
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, str) and value.startswith("RAW:"):
            lines.append(f"{key} = {value[4:]}")
        elif isinstance(value, (str, list)):
            lines.append(f"{key} = {value!r}".replace("'", '"'))
        else:
            lines.append(f"{key} = {value}")
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_refused(done: subprocess.CompletedProcess[str], *words: str, code: int = 2) -> None:
    """Exit ``code`` with a message holding ``words`` and no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    for word in words:
        assert word in done.stderr, (word, done.stderr)


def rows(out: Path) -> list[dict[str, Any]]:
    """The trials rows of ``out``'s store, read-only ([] where there is none yet, or it is still being made)."""
    if not (out / "results.sqlite").is_file():
        return []
    try:
        with Store.open(out, readonly=True) as store:
            return store.trials()
    except StoreError as e:
        if e.__cause__ is not None:  # SQLite's own error: damaged, unreadable or locked; the test must see it
            raise
        return []  # no schema version or no trials table yet: a run is making the store


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def workers_of(parent: int) -> list[int]:
    """PIDs of the ``harness.run.worker`` processes whose parent is ``parent``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"harness.run.worker" in cmdline:
            found.append(int(entry))
    return found


def _fd_links(pid: int) -> set[str]:
    links = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return links
    for name in names:
        try:
            links.add(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
    return links


def request_sent(parent: int, worker: int) -> bool:
    """Whether ``parent`` has written ``worker``'s request and closed its stdin (or the worker has ended).

    A worker found just after it was spawned may still wait for its request on stdin: a parent stopped then never
    sends it, and the worker cannot finish on its own. Both ends of a pipe read as the same ``pipe:[inode]``, so the
    parent has closed its end once none of its descriptors names the pipe the worker reads as fd 0.
    """
    try:
        stdin = os.readlink(f"/proc/{worker}/fd/0")
    except OSError:
        return True  # the worker is gone, or has closed its stdin
    return not stdin.startswith("pipe:") or stdin not in _fd_links(parent)


def wait_for(condition: Any, timeout_s: float, what: str) -> Any:
    """Poll ``condition()`` until it is truthy; fail the test with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def gone_within(pids: list[int], grace_s: float = ORPHAN_GRACE_S) -> list[int]:
    """The PIDs of ``pids`` still alive after ``grace_s`` (polled: returns as soon as all are gone)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _cpu_ticks_and_state(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12]), fields[0]  # utime + stime; state


def hanging(pid: int, quiet_s: float = 1.0, max_ticks: int = 15) -> bool:
    """Whether ``pid`` sleeps, using at most ``max_ticks`` clock ticks (15% of a core) over ``quiet_s``: past
    its set-up (which keeps a core busy), in the fake adapter's hang. A probe's VmData watcher still wakes every
    millisecond: ~3% of a core on this machine when it is quiet, more when the other test worker loads it (seen in
    CI: a probe hanging at ~5% was never taken as hanging, under 3 ticks, and the test timed out). A worker
    killed while still starting dies anyway, at its next write to the parent's closed pipe; only one that is
    quietly hanging shows whether it notices its parent is gone."""
    before = _cpu_ticks_and_state(pid)
    time.sleep(quiet_s)
    after = _cpu_ticks_and_state(pid)
    return (before is not None and after is not None and after[0] - before[0] <= max_ticks
            and before[1] == after[1] == "S")
