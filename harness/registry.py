"""Adapters registered in the ``batchscope.adapters`` entry-point group.

Listing reads entry-point metadata and imports the (import-light) adapter modules, never a framework:
framework versions come from installed distribution metadata. A broken third-party adapter becomes a
warning in the listing instead of a crash (the habit of xarray's backend plugins).

A name belongs to one adapter. A plugin that registers a built-in adapter's name (``jax``) does not replace it:
the built-in is used and the plugin is listed as shadowed, with a warning that says to register it under a name
of its own. Stores, reports and experiment files say ``jax``, and that must mean one adapter, whatever else is
installed; a plugin that wants to stand in for a built-in is chosen by its own name.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import warnings
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

from harness.errors import AdapterError, ConfigError

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
    builtin: bool = False  # one of batchscope's own adapters (its entry point is batchscope's)


#: the distribution whose entry points are the built-in adapters
BUILTIN_DISTRIBUTION = "batchscope"


class Shadowed(NamedTuple):
    """A plugin's entry point that is not used, because a built-in adapter has its name."""

    name: str
    target: str  # the plugin's "module:Class"
    origin: str  # "from <distribution> <version>"
    used: str  # the built-in's "module:Class"


def _is_builtin_ep(ep: md.EntryPoint) -> bool:
    dist = getattr(ep, "dist", None)
    return dist is not None and _normalise(dist.name) == BUILTIN_DISTRIBUTION


def _normalise(dist_name: str) -> str:
    return dist_name.lower().replace("_", "-")


def _rename_hint(name: str) -> str:
    return (f"register it under a name of its own in the [project.entry-points.\"{GROUP}\"] table of its "
            f"pyproject.toml (the class's `name` too), and name that in experiments instead of {name!r}")


@cache
def _registered() -> tuple[dict[str, md.EntryPoint], tuple[Shadowed, ...]]:
    """The entry points in use by name, and the plugins shadowed by a built-in of the same name (warned)."""
    found: dict[str, md.EntryPoint] = {}
    shadowed: list[Shadowed] = []
    for ep in md.entry_points(group=GROUP):
        earlier = found.get(ep.name)
        if earlier is None or earlier.value == ep.value:
            found[ep.name] = ep
            continue
        builtin, plugin = (earlier, ep) if _is_builtin_ep(earlier) else (ep, earlier)
        if _is_builtin_ep(builtin):  # the built-in keeps its name, whichever was found first
            shadowed.append(Shadowed(ep.name, plugin.value, _dist_name(plugin), builtin.value))
            warnings.warn(
                f"plugin {plugin.value} ({_dist_name(plugin)}) registers the adapter name {ep.name!r}, which is the "
                f"built-in adapter's ({builtin.value}); the built-in is used and the plugin is not. To run the "
                f"plugin, {_rename_hint(ep.name)}",
                RuntimeWarning,
                stacklevel=4,
            )
            found[ep.name] = builtin
            continue
        warnings.warn(
            f"adapter {ep.name!r} is registered twice: {earlier.value} ({_dist_name(earlier)}) and "
            f"{ep.value} ({_dist_name(ep)}); using {ep.value}. Uninstall one of them, or rename its "
            f"entry point in the [project.entry-points.\"{GROUP}\"] table of its pyproject.toml",
            RuntimeWarning,
            stacklevel=4,
        )
        found[ep.name] = ep
    return found, tuple(shadowed)


def _entry_points() -> dict[str, md.EntryPoint]:
    """The group's entry points in use, by name (see :func:`_registered` for names registered twice)."""
    return _registered()[0]


def shadowed_plugins() -> tuple[Shadowed, ...]:
    """Plugins not used because they register a built-in adapter's name (each warned once when read)."""
    return _registered()[1]


def _dist_name(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"from {dist.name} {dist.version}" if dist is not None else "from an unknown distribution"


def refresh() -> None:
    """Forget the entry points read so far (after installing a plugin, or in tests that register one)."""
    _registered.cache_clear()


def is_builtin(name_or_target: str) -> bool:
    """Whether a registered name (or a ``module:Class``) is one of batchscope's own adapters."""
    builtin = {n: ep.value for n, ep in _entry_points().items() if _is_builtin_ep(ep)}
    return name_or_target in builtin.values() if ":" in name_or_target else name_or_target in builtin


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


class Registered(NamedTuple):
    """An adapter as its registered name resolves: what the worker imports, and the class the parent reads."""

    target: str  # "module:Class"
    cls: type[Adapter]


def lookup(name: str, asked_as: str = "") -> Registered:
    """The adapter registered as ``name``: its ``module:Class`` and the class, loaded and checked (its module imported,
    never its framework). A command does this once per framework (:func:`harness.envs.runtime.resolve_runtimes`) and
    reads both from the record it makes from them.

    ``asked_as``: the flag or key that named it (``--framework``): an unknown name is then the user's to fix
    (ConfigError, naming the flag and the registered names), not an installation's (AdapterError).
    """
    if asked_as and name not in _entry_points():
        raise ConfigError(f"{asked_as} {name!r} is not a registered adapter; known: "
                          f"{', '.join(sorted(_entry_points()))}")
    target = adapter_target(name)
    return Registered(target, load_adapter(target, name))


def adapter_class(name: str) -> type[Adapter]:
    """Load the adapter class registered as ``name`` (imports its module, never its framework). A command resolves
    each framework once (:class:`harness.envs.runtime.FrameworkRuntime`) and reads the class from that record;
    this is for what comes before one (the experiment's checks, the listing)."""
    return lookup(name).cls


def load_adapter(target: str, name: str) -> type[Adapter]:
    """The adapter class at ``target`` (``module:Class``), registered as ``name``: the one place a class is loaded
    and checked (imports its module, never its framework).

    Raises:
        AdapterError: the module cannot be imported, or the class is not an adapter.
    """
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    # a third party's module may raise anything on import; it is that adapter's problem, never a crash
    except Exception as e:
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
            out.append(AdapterInfo(name, target, "?", False, None, problem=str(e), builtin=is_builtin(name)))
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
            out.append(AdapterInfo(name, target, "?", False, None, problem=problem, builtin=is_builtin(name)))
            continue
        out.append(AdapterInfo(name, target, dist_used, installed, version, builtin=is_builtin(name)))
    return out



def framework_modules() -> frozenset[str]:
    """The top-level modules of every registered adapter's framework (``import_name`` and ``framework_modules``).

    The parent must import none of them; the layering test, the contract suite and the user-model guard read
    this instead of a list kept by hand, so a fifth adapter's framework is covered once it is registered. An
    adapter that cannot be loaded is left out (the listing warns about it).
    """
    found: set[str] = set()
    for name in _entry_points():
        try:
            cls = adapter_class(name)
        except AdapterError:
            continue
        found.add(str(cls.import_name).partition(".")[0])
        found.update(str(m).partition(".")[0] for m in getattr(cls, "framework_modules", ()))
    return frozenset(found)
