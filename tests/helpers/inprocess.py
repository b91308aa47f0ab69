"""The command line called in the test process: ``harness.cli.main(argv)`` with the argv, environment and working
directory a user's ``batchscope`` would have, its stdout and stderr captured and its exit code returned, as a
:class:`subprocess.CompletedProcess` like the one a real process gives (issue 42, item 2).

A test of what ``report``, ``recommend``, ``compare`` or ``export`` print (or refuse with) pays no interpreter
start-up and imports the report's libraries once per test process, not once per call. The tests whose subject is the
process itself (a signal, a broken pipe, a kill, an OS limit, a missing interpreter) start a real one
(:func:`tests.helpers.cli.bs`, :func:`tests.faults.helpers.bs`).

What a fresh process would not carry over is reset around each call: the environment, the working directory, the
adapters registered, the interpreters chosen and the user models described by an earlier call.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata as md
import io
import os
import subprocess
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: Path | None) -> Iterator[None]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


@contextlib.contextmanager
def _adapters(spec: str) -> Iterator[None]:
    """``name=module:Class,...`` registered as entry points for the call, as ``tests/faults/launch.py`` does."""
    from harness import registry

    real = registry._entry_points
    extra = {}
    for item in filter(None, spec.split(",")):
        name, _, target = item.partition("=")
        extra[name] = md.EntryPoint(name=name, value=target, group=registry.GROUP)
    if extra:
        found = dict(real())
        registry._entry_points = lambda: {**found, **extra}  # type: ignore[assignment]
    try:
        yield
    finally:
        registry._entry_points = real  # type: ignore[assignment]


@contextlib.contextmanager
def _fresh_process_state() -> Iterator[None]:
    """The module-level memories a new process starts without: user models described (the interpreters a command
    chose are no module's memory: each command holds its own runtimes)."""
    from harness.models import sandbox

    described = dict(sandbox._DESCRIBED)
    sandbox._DESCRIBED.clear()
    try:
        yield
    finally:
        sandbox._DESCRIBED.clear()
        sandbox._DESCRIBED.update(described)


# ---------------------------------------------------------------- permissions that apply even to root
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_VERSION_3 = 0x20080522
#: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER: what lets root ignore permission bits
_FILE_OVERRIDE_MASK = (1 << 1) | (1 << 2) | (1 << 3)


def _capabilities(libc: ctypes.CDLL, data: ctypes.Array[_CapData] | None = None) -> ctypes.Array[_CapData]:
    header = _CapHeader(_CAP_VERSION_3, 0)
    if data is None:
        data = (_CapData * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "capget failed")
    elif libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed: run the tests as a user, not root")
    return data


@contextlib.contextmanager
def _as_user() -> Iterator[None]:
    """Permission bits apply to this thread (the one that runs the command) for the call, even as root: the three
    capabilities that ignore them leave its *effective* set and come back from its permitted set afterwards.
    Capabilities are per thread on Linux; a thread the command starts inherits the reduced set."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    before = _capabilities(libc)
    reduced = (_CapData * 2)()
    ctypes.memmove(reduced, before, ctypes.sizeof(reduced))
    reduced[0].effective &= ~_FILE_OVERRIDE_MASK
    _capabilities(libc, reduced)
    try:
        yield
    finally:
        _capabilities(libc, before)


def cli(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None, adapters: str = "",
        as_user: bool = False) -> subprocess.CompletedProcess[str]:
    """``batchscope ARGV`` run by ``harness.cli.main`` in this process.

    Args:
        argv: the arguments after ``batchscope``.
        env: the command's whole environment (default: this process's, unchanged).
        cwd: its working directory (default: this process's).
        adapters: ``name=module:Class,...`` registered for the call (``tests.faults.launch``'s variable).
        as_user: file permissions apply even under root (``tests.faults.helpers.permissions_apply``'s job for a
            real process).

    Returns:
        The exit code (``main``'s return, or argparse's ``SystemExit``) and the captured stdout and stderr.
    """
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env, cwd))
        stack.enter_context(_adapters(adapters))
        stack.enter_context(_fresh_process_state())
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        if as_user:
            stack.enter_context(_as_user())
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse: usage errors (2), --help and --version (0)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=err)
        except Exception:  # noqa: BLE001 - what would end a real process with a traceback, as the test sees it
            traceback.print_exc(file=err)
            code = 1
    return subprocess.CompletedProcess(["batchscope", *argv], code, out.getvalue(), err.getvalue())
