"""Who is using a managed environment: held shared while a command may start workers in it, taken exclusive to move it
aside (docs/environments.md, "In use").

The lock is ``flock`` on ``<envs>/.<name>.use``, beside the environment's build lock (``.<name>.lock``,
:func:`harness.envs.build.build`):

- **shared** by every command that may start workers in the environment, from its resolution
  (:func:`harness.envs.resolve.managed_interpreter`) to the command's end (:func:`release_all`, called when the
  ``batchscope`` command returns; the kernel drops it when the process ends, however it ends: ``kill -9`` included),
  and by the executor for each unit it runs (a Ray node's task, a library caller that resolved nothing). The workers
  take nothing: each runs only while its parent holds the lock for it (the executor kills a worker's process group on
  every way out, and a worker whose parent dies ends with it, ``harness/run/worker/lifeline.py``);
- **exclusive** only to move the environment aside (a damaged one rebuilt, ``batchscope env build --rebuild``), and
  only under the build lock. It waits for the users a bounded time (:data:`WAIT_VAR`, default :data:`WAIT_S`),
  saying once whom it waits for, and gives up with :class:`InUse` rather than moving the environment from under
  running workers.

Lock order, so that two commands never wait on each other: the build lock is never waited for with the shared hold
kept (:func:`let_go` before it, :func:`take_back` once it is had: at once, as only the build lock's holder ever holds
the use lock exclusive). Two commands that both find the environment damaged then do not deadlock: the second let
its hold go before waiting for the first's build lock, so the first can take the use lock exclusive, rebuild, and
the second finds it whole. A command that holds the environment and must rebuild it itself (a trial found it gone)
converts its own hold: one process has one open lock file per environment, counted (:func:`hold` again only counts),
since ``flock`` would make a second open file of the same process wait for the first. The threads of a process share
that hold: one that lets it go, lets it go for all of them (the environments of one command are resolved by threads,
and its trials run one at a time).

Each process that holds an environment leaves a note in ``<envs>/.<name>.users/`` (``PID@HOST``: its command line
and since when) so that a waiting rebuild can name it; a note whose process is gone (on this host) is removed by the
reader that finds it. On Windows (no ``fcntl``) nothing is held and nothing waits: each move aside says so (a note).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.envs.spec import EnvSpec
from harness.errors import BatchscopeWarning, ConfigError

if sys.platform == "win32":  # no flock: nothing is held (module docstring)
    _FLOCK = False
else:
    import fcntl

    _FLOCK = True

#: how long a rebuild waits for the commands using an environment before it gives up, leaving it in place
WAIT_S = 300.0
#: sets :data:`WAIT_S` (seconds)
WAIT_VAR = "BATCHSCOPE_ENV_WAIT_S"
#: how often a waiting lock is tried again
POLL_S = 0.1


class InUse(Exception):
    """The lock was not had within the wait: ``who`` names the other holders, ``waited_s`` how long it waited.
    Raised to :mod:`harness.envs.build`, which words it (``EnvironmentInUseError``)."""

    def __init__(self, who: str, waited_s: float) -> None:
        super().__init__(f"in use by another batchscope command ({who}) after {waited_s:.0f} s")
        self.who = who
        self.waited_s = waited_s


def wait_s() -> float:
    """How long a rebuild waits for an environment's users: ``$BATCHSCOPE_ENV_WAIT_S``, else :data:`WAIT_S`.

    Raises:
        ConfigError: the variable is not a number of seconds >= 0.
    """
    raw = os.environ.get(WAIT_VAR, "").strip()
    if not raw:
        return WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{WAIT_VAR}={raw!r}: expected how many seconds a rebuild waits for the commands using "
                          "an environment (a number >= 0)")
    return value


def lock_file(spec: EnvSpec, root: Path) -> Path:
    """The environment's use lock: ``<envs>/.<name>.use``."""
    return root / f".{spec.name}.use"


def notes_dir(spec: EnvSpec, root: Path) -> Path:
    """Where each process holding the environment leaves its note: ``<envs>/.<name>.users/``."""
    return root / f".{spec.name}.users"


@dataclass
class _Held:
    """This process's open lock file of one environment: how many holds it counts, which lock the kernel gives it
    (``LOCK_SH``, ``LOCK_EX``, or 0 while let go), and its note."""

    fd: int
    note: Path
    count: int = 0
    mode: int = 0


#: this process's lock files, by path: one each (a second would wait for the first: flock locks an open file). The
#: locks this process holds, not a choice of interpreter: a fresh process (a Ray node's) rightly holds none
#: (tests/envs/test_runtime.py's check of module-level state names it as such)
_HELD: dict[Path, _Held] = {}
_GUARD = threading.RLock()


def _windows_note(spec: EnvSpec, root: Path) -> None:
    warnings.warn(f"on Windows batchscope takes no lock on a managed environment in use (no flock): "
                  f"{spec.path(root)} is moved aside without knowing whether another batchscope command runs in it",
                  BatchscopeWarning, stacklevel=3)


def _command_line() -> str:
    """This process's command line, as its note says it: ``batchscope run e.toml``, ``python -m pytest ...``."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    first = f"python -m {argv0.parent.name}" if argv0.name == "__main__.py" else argv0.name
    return " ".join([first, *sys.argv[1:]])[:200]


def _enter(spec: EnvSpec, root: Path) -> _Held:
    """This process's lock file of ``spec``'s environment, counted once more (opened, with no lock yet, if new).

    Raises:
        OSError: the lock file cannot be made (a read-only cache).
    """
    path = lock_file(spec, root)
    with _GUARD:
        held = _HELD.get(path)
        if held is None:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            held = _HELD[path] = _Held(fd, notes_dir(spec, root) / f"{os.getpid()}@{socket.gethostname()}")
        held.count += 1
        return held


def _leave(spec: EnvSpec, root: Path) -> None:
    """One hold fewer: the last closes the lock file (the kernel drops the lock) and removes the note; while others
    remain, the shared lock is taken back where it was let go or made exclusive (at once: see :func:`take_back`)."""
    path = lock_file(spec, root)
    with _GUARD:
        held = _HELD.get(path)
        if held is None:
            return
        held.count -= 1
        if held.count > 0:
            if held.mode != fcntl.LOCK_SH:
                _try(held, fcntl.LOCK_SH)
            return
        del _HELD[path]
        os.close(held.fd)
        held.note.unlink(missing_ok=True)


def _try(held: _Held, mode: int) -> bool:
    """One attempt at ``mode`` on ``held``'s file, without waiting; the note written once a lock is had."""
    with _GUARD:
        try:
            fcntl.flock(held.fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        held.mode = mode
        if not held.note.exists():
            _write_note(held.note)
        return True


def _write_note(note: Path) -> None:
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f".{note.name}.tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": _command_line(),
                                   "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        os.replace(tmp, note)
    except OSError:  # a read-only or full cache: the lock holds without its note of who holds it
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def holders(spec: EnvSpec, root: Path) -> list[dict[str, object]]:
    """The notes of the other processes holding ``spec``'s environment (pid, host, command, since); a note of a
    process on this host that is gone is removed here (a killed holder leaves its note, never its lock)."""
    out: list[dict[str, object]] = []
    if not _FLOCK:  # none written (and os.kill(pid, 0) ends a process on Windows)
        return out
    here = socket.gethostname()
    for note in sorted(notes_dir(spec, root).glob("*@*")):
        if note.name.startswith("."):  # one being written
            continue
        try:
            data = json.loads(note.read_text())
            pid, host = int(data["pid"]), str(data["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host == here and pid == os.getpid():
            continue
        if host == here and not _alive(pid):
            note.unlink(missing_ok=True)
            continue
        out.append(data)
    return out


def who(spec: EnvSpec, root: Path) -> str:
    """The other holders in words: ``pid 123: batchscope run e.toml, since 2026-12-06 23:10:05``."""
    found = holders(spec, root)
    if not found:
        return "its process left no note: an older batchscope, or one on another host"
    here = socket.gethostname()
    return "; ".join(f"pid {d['pid']}{'' if d['host'] == here else ' on ' + str(d['host'])}: {d.get('command')}, "
                     f"since {d.get('since')}" for d in found)


def _wait_for(held: _Held, mode: int, wait: float, on_wait: Callable[[str], None], spec: EnvSpec, root: Path) -> None:
    """``mode`` on ``held``'s file, tried every :data:`POLL_S` for up to ``wait`` s; ``on_wait`` gets the other
    holders in words once, at the first refusal.

    Raises:
        InUse: not had within ``wait``.
    """
    t0 = time.monotonic()
    said = ""
    while not _try(held, mode):
        if not said:
            said = who(spec, root)
            on_wait(said)
        if time.monotonic() - t0 >= wait:
            raise InUse(who(spec, root), time.monotonic() - t0)
        time.sleep(POLL_S)


def hold(spec: EnvSpec, root: Path, on_wait: Callable[[str], None] = lambda who: None,
         wait: float | None = None) -> None:
    """This process uses ``spec``'s environment under ``root`` from now until :func:`release` (or
    :func:`release_all`, or its end): shared, counted. Waits (up to ``wait``, default :func:`wait_s`) only while
    another process moves the environment aside.

    Raises:
        InUse: another process held it exclusive all that time.
    """
    if not _FLOCK:  # nothing held (the move aside says so: exclusive)
        return
    try:
        held = _enter(spec, root)
    except OSError:  # a read-only cache: nothing can move it aside from here either; used without a lock
        return
    if held.mode:  # held already (shared, or exclusive by this process's own rebuild)
        return
    try:
        _wait_for(held, fcntl.LOCK_SH, wait_s() if wait is None else wait, on_wait, spec, root)
    except BaseException:
        _leave(spec, root)
        raise


def release(spec: EnvSpec, root: Path) -> None:
    """One :func:`hold` fewer; the last one lets the environment go."""
    if _FLOCK:
        _leave(spec, root)


def release_all() -> None:
    """Every environment this process holds, let go (the end of a command; and at the interpreter's exit, for a
    caller that resolved environments outside a command: the kernel drops the locks then anyway, this removes the
    notes)."""
    with _GUARD:
        for held in _HELD.values():
            os.close(held.fd)
            held.note.unlink(missing_ok=True)
        _HELD.clear()


atexit.register(release_all)


def let_go(spec: EnvSpec, root: Path) -> None:
    """This process's hold on the environment let go, still counted (before waiting for its build lock)."""
    if not _FLOCK:
        return
    with _GUARD:
        held = _HELD.get(lock_file(spec, root))
        if held is not None and held.mode:
            fcntl.flock(held.fd, fcntl.LOCK_UN)
            held.mode = 0


def take_back(spec: EnvSpec, root: Path, wait: float | None = None) -> None:
    """The hold :func:`let_go` let go, taken back (once the build lock is had: nobody else then holds the use lock
    exclusive, so the wait is at most another process's rename; bounded all the same: ``wait``, default
    :func:`wait_s`).

    Raises:
        InUse: another process held it exclusive all the wait long (one that does not take the build lock first).
    """
    if not _FLOCK:
        return
    with _GUARD:
        held = _HELD.get(lock_file(spec, root))
    if held is not None and not held.mode:
        _wait_for(held, fcntl.LOCK_SH, wait_s() if wait is None else wait, lambda who: None, spec, root)


@contextlib.contextmanager
def exclusive(spec: EnvSpec, root: Path, on_wait: Callable[[str], None] = lambda who: None,
              wait: float | None = None) -> Iterator[None]:
    """The environment to this process alone for the body (moving it aside), under its build lock: this process's
    own hold, if any, converted; the other processes' holds waited for up to ``wait`` (default :func:`wait_s`),
    ``on_wait`` told once whom it waits for. Afterwards this process holds it as before (shared, or not at all).

    Raises:
        InUse: another process still used it after ``wait``: nothing was done to it.
    """
    if not _FLOCK:
        _windows_note(spec, root)
        yield
        return
    held = _enter(spec, root)
    try:
        let_go(spec, root)  # a conversion is a release and a new lock anyway (flock(2)); said plainly here
        _wait_for(held, fcntl.LOCK_EX, wait_s() if wait is None else wait, on_wait, spec, root)
        yield
    finally:
        _leave(spec, root)
