"""Counting how often a command turns a framework's name into its adapter (issue 51: once per framework per command)."""

from __future__ import annotations

import sys

import pytest

from harness import registry


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names looked up in the registry from now on, in order: every binding of
    :func:`harness.registry.adapter_target` (the one function that turns a name into its ``module:Class``; a module
    that imported it by name holds its own binding) is replaced by one that records the name first. ``adapter_class``
    and ``lookup`` reach it through the registry's own binding, so each lookup counts once."""
    asked: list[str] = []
    real = registry.adapter_target

    def counted(name: str) -> str:
        asked.append(name)
        return real(name)

    for name, module in list(sys.modules.items()):
        if (name == "harness" or name.startswith(("harness.", "adapters.", "report."))) \
                and getattr(module, "adapter_target", None) is real:
            monkeypatch.setattr(module, "adapter_target", counted)
    return asked
