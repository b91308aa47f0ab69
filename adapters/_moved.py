"""Names that moved into a framework's package (adapters/<framework>/), still reachable at their old place.

One module-level ``__getattr__`` per old module, made here, finds a moved name at its new home and warns once
per lookup with a :class:`DeprecationWarning` naming the new import (CHANGELOG, "For plugin authors"). Nothing is
re-exported eagerly: importing an old module imports no framework package until a moved name is asked for.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def deprecated_getattr(old_module: str, moved: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module``: ``moved`` maps an old name to (new module, new name)."""

    def __getattr__(name: str) -> Any:
        try:
            new_module, new_name = moved[name]
        except KeyError:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}") from None
        target = f"{new_module}.{new_name}" if new_name else new_module
        warnings.warn(f"{old_module}.{name} moved to {target}; import it from there (the old name will be removed)",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new_module)
        return getattr(module, new_name) if new_name else module

    return __getattr__

