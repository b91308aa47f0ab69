"""Adapters registered in the ``batchscope.adapters`` entry-point group.

Listing reads entry-point metadata and imports the (import-light) adapter modules, never a framework:
framework versions come from installed distribution metadata. A broken third-party adapter becomes a
warning in the listing instead of a crash (the habit of xarray's backend plugins).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import warnings
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from harness.errors import AdapterError

if TYPE_CHECKING:
    from adapters.base import Adapter

GROUP = "batchscope.adapters"
#: what the parent reads from an adapter class (duck-typed: the registry must not import adapters.base,
#: whose import chain a broken plugin environment could break too)
_ADAPTER_ATTRIBUTES = ("name", "distributions", "import_name", "oom_stderr_patterns", "validate_options",
                       "validate_precision")


@dataclass(frozen=True)
class AdapterInfo:
    """What the listing shows about one adapter."""

    name: str
    target: str  # "module:Class", what the worker imports
    distribution: str  # the framework's PyPI name
    installed: bool
    version: str | None
    problem: str | None = None


@cache
def _entry_points() -> dict[str, md.EntryPoint]:
    """The group's entry points by name; a name registered twice warns and the last one found is used."""
    found: dict[str, md.EntryPoint] = {}
    for ep in md.entry_points(group=GROUP):
        earlier = found.get(ep.name)
        if earlier is not None and earlier.value != ep.value:
            warnings.warn(
                f"adapter {ep.name!r} is registered twice: {earlier.value} ({_dist_name(earlier)}) and "
                f"{ep.value} ({_dist_name(ep)}); using {ep.value}. Uninstall one of them, or rename its "
                f"entry point in the [project.entry-points.\"{GROUP}\"] table of its pyproject.toml",
                RuntimeWarning,
                stacklevel=3,
            )
        found[ep.name] = ep
    return found


def _dist_name(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"from {dist.name} {dist.version}" if dist is not None else "from an unknown distribution"


def refresh() -> None:
    """Forget the entry points read so far (after installing a plugin, or in tests that register one)."""
    _entry_points.cache_clear()


def known_adapter_names() -> frozenset[str]:
    """Names of every registered adapter, loadable or not."""
    return frozenset(_entry_points())


def adapter_target(name: str) -> str:
    """``module:Class`` of an adapter, as the worker imports it."""
    try:
        return _entry_points()[name].value
    except KeyError:
        raise AdapterError(f"no adapter named {name!r}; registered: {', '.join(sorted(_entry_points()))}. "
                           "Reinstall batchscope (make test) if a built-in adapter is missing.") from None


def adapter_class(name: str) -> type[Adapter]:
    """Load an adapter class (imports its module, never its framework)."""
    target = adapter_target(name)
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    # a third party's module may raise anything on import; it is that adapter's problem, never a crash
    except Exception as e:  # noqa: BLE001
        raise AdapterError(f"adapter {name!r} ({target}) cannot be loaded: {type(e).__name__}: {e}; fix or "
                           "uninstall the package that registers it") from e
    missing = [a for a in _ADAPTER_ATTRIBUTES if not hasattr(cls, a)]
    if not isinstance(cls, type) or missing:
        raise AdapterError(f"adapter {name!r} ({target}) is not an Adapter (a subclass of adapters.base.Adapter; "
                           f"it lacks {', '.join(missing) or 'a class'}); fix or uninstall the package that "
                           "registers it")
    declared = getattr(cls, "name", None)
    if declared != name:
        # The worker, the store and the report use the entry-point name; a class that calls itself
        # something else would write results under one name and look up its own settings under another.
        warnings.warn(
            f"adapter {name!r} ({target}) declares name = {declared!r}; set the class's name to {name!r} "
            "(it must equal the entry-point name)",
            RuntimeWarning,
            stacklevel=2,
        )
    return cls  # type: ignore[no-any-return]


def _dist_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def list_adapters() -> list[AdapterInfo]:
    """Every registered adapter with its framework's installed version (no framework imported)."""
    out = []
    for name in sorted(_entry_points()):
        target = _entry_points()[name].value
        try:
            cls = adapter_class(name)
        except AdapterError as e:
            warnings.warn(str(e), RuntimeWarning, stacklevel=2)
            out.append(AdapterInfo(name, target, "?", False, None, problem=str(e)))
            continue
        try:
            version = None
            dist_used = cls.distributions[0]
            for dist in cls.distributions:
                version = _dist_version(dist)
                if version:
                    dist_used = dist
                    break
            installed = version is not None or importlib.util.find_spec(cls.import_name) is not None
        except Exception as e:  # noqa: BLE001 - a plugin's bad metadata is listed as its problem
            problem = f"adapter {name!r} ({target}) has unusable metadata: {type(e).__name__}: {e}"
            out.append(AdapterInfo(name, target, "?", False, None, problem=problem))
            continue
        out.append(AdapterInfo(name, target, dist_used, installed, version))
    return out
