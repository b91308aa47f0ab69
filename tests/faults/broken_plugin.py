"""Broken third-party adapters, as the registry may meet them: a module that raises on import (see
:mod:`tests.faults.raising_plugin`) and an entry point to something that is not an Adapter."""

from __future__ import annotations


def not_an_adapter() -> None:
    """An entry point's target that is a function, not an adapter class."""
