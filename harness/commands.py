"""Subcommands that live in modules of their own register here, so cli.py stays small."""

from __future__ import annotations

from typing import Any

#: (module, function) pairs; each function takes the argparse sub-parsers object and adds its command.
REGISTRARS: tuple[tuple[str, str], ...] = (
    ("harness.compare", "register"),
    ("harness.maxbatch_cli", "register"),
    ("report.cli", "register"),
)


def register_all(sub: Any) -> None:
    """Add every optional subcommand to the parser."""
    import importlib

    for module, func in REGISTRARS:
        getattr(importlib.import_module(module), func)(sub)
