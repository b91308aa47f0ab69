"""The ``batchscope`` command line.

Exit codes: 0 the command did its job (a sweep with oom trials included); 2 usage, configuration or
data errors (nothing written), or an output path that cannot be written; 3 the model does not fit at
batch 1; 1 internal errors; 130 Ctrl-C (SIGINT); 143 SIGTERM; 129 SIGHUP. However the command ends, the
worker in flight is killed (its whole process group) and every finished trial stays stored.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from harness import __version__
from harness.cli import adapters, compare, doctor, env, export, maxbatch, recommend, report, run
from harness.diskfull import disk_full, is_disk_full
from harness.envs.inuse import release_all
from harness.errors import BatchscopeError, BatchscopeWarning, ConfigError, Terminated

Command = Callable[[argparse.Namespace], int]


#: Every subcommand, in the order ``--help`` lists them; each module's ``register(sub)`` adds its parser.
COMMANDS = (run, compare, report, recommend, maxbatch, export, adapters, doctor, env)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="batchscope", description="Measure training across batch sizes "
                                     "and frameworks, one worker process per trial.")
    parser.add_argument("--version", action="version", version=f"batchscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


#: what to do after an interruption, per command (only ``run`` has --resume)
_AFTER_INTERRUPT = {
    "run": "every finished trial is stored; run the same command with --resume to finish",
    "maxbatch": "the probes that finished are stored; run the same command again to search anew",
}


#: the signals received by this process while a command ran (see the last resort in :func:`main`)
_RECEIVED: list[int] = []


def _raise_terminated(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise Terminated(signum)


def _raise_interrupt(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise KeyboardInterrupt


def install_signal_handlers() -> dict[int, Any]:
    """SIGTERM and SIGHUP unwind like Ctrl-C (raising :class:`Terminated`), so the executor's ``finally``
    kills the worker's process group and the store is closed cleanly; by default Python would die at
    once and leave the worker running with no parent (issue 13, item 2). Returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set them
        return {}
    _RECEIVED.clear()
    previous: dict[int, Any] = {sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # left alone where SIGINT is ignored
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_interrupt)
    return previous


def _call(args: argparse.Namespace) -> int:
    """Run the command, its library notes (:class:`BatchscopeWarning`) printed as ``batchscope: note: ...``."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, BatchscopeWarning):
            print(f"batchscope: note: {message}", file=sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", BatchscopeWarning)
        warnings.showwarning = show
        code = int(args.func(args))
    sys.stdout.flush()  # here, not at exit: a reader gone meanwhile (`| head`) is handled like any other
    return code


def _stdout_closed(command: str, after: str) -> int:
    """stdout's reader went away (``batchscope run ... | head -1``): stop as SIGPIPE would stop a Unix tool, exit
    128 + SIGPIPE; the rest of the output goes nowhere (not to a traceback at exit). A command that writes a store
    says so, since its worker was stopped; a reading one was only cut short, as its reader asked."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout descriptor at all: nothing left to silence
        pass
    if command in _AFTER_INTERRUPT:
        print(f"\nbatchscope: stopped: stdout was closed by its reader (broken pipe); the worker in flight was "
              f"stopped; {after}.", file=sys.stderr)
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``batchscope`` and ``python -m harness``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = install_signal_handlers()
    after = _AFTER_INTERRUPT.get(args.command, "nothing was left half-written; run the command again")
    try:
        return _call(args)
    except BatchscopeError as e:
        print(f"batchscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"\nbatchscope: interrupted (SIGINT); the worker in flight was stopped; {after}.", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"\nbatchscope: stopped: {e}; the worker in flight was stopped; {after}.", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError as e:
        if e.filename is not None:  # a named pipe the user gave, not stdout
            print(f"batchscope: error: {e.filename}: {e.strerror}; its reader went away", file=sys.stderr)
            return 2
        return _stdout_closed(args.command, after)
    except OSError as e:  # a path the user gave cannot be read or written (full disk, read-only, removed)
        where = f"{e.filename}: " if e.filename else ""
        if is_disk_full(e):  # a write point that does not say it itself (issue 32)
            said = disk_full(e.filename, "", kept=after) if e.filename else f"the disk is full ({e.strerror}); {after}"
            print(f"batchscope: error: {said}", file=sys.stderr)
            return 2
        print(f"batchscope: error: {where}{e.strerror or e}; check that the path exists, is writable and has "
              "space (finished trials are kept in the store)", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - last resort: an internal error, reported with its traceback
        if _RECEIVED:  # a library caught the signal's exception and raised its own (seen in reportlab)
            got = signal.Signals(_RECEIVED[0])
            print(f"\nbatchscope: stopped: got {got.name}; the worker in flight was stopped; {after}.", file=sys.stderr)
            return 128 + got.value
        traceback.print_exc()
        print("batchscope: internal error (exit 1); please report it with the traceback above", file=sys.stderr)
        return 1
    finally:  # called in-process (tests, notebooks): give the caller its own handlers back
        release_all()  # the managed environments this command used (harness.envs.inuse): its workers are gone
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["main", "build_parser", "ConfigError"]
