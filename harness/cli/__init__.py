"""The ``batchscope`` command line.

Exit codes: 0 the command did its job (a sweep with oom trials included); 2 usage, configuration or
data errors (nothing written); 3 the model does not fit at batch 1; 1 internal errors; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from harness import __version__
from harness.cli import compare, doctor, export, maxbatch, recommend, report, run
from harness.errors import BatchscopeError, ConfigError

Command = Callable[[argparse.Namespace], int]


#: Every subcommand, in the order ``--help`` lists them; each module's ``register(sub)`` adds its parser.
COMMANDS = (run, compare, report, recommend, maxbatch, export, doctor)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="batchscope", description="Measure training across batch sizes "
                                     "and frameworks, one worker process per trial.")
    parser.add_argument("--version", action="version", version=f"batchscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``batchscope`` and ``python -m harness``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BatchscopeError as e:
        print(f"batchscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\nbatchscope: interrupted. Every finished trial is stored; run the same command with "
              "--resume to finish.", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - last resort: an internal error, reported with its traceback
        traceback.print_exc()
        print("batchscope: internal error (exit 1); please report it with the traceback above", file=sys.stderr)
        return 1


__all__ = ["main", "build_parser", "ConfigError"]
