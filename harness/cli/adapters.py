"""``batchscope adapters``: every registered adapter, its plugin API version and capabilities, without a framework.

What an adapter can do is detected from what its class overrides (:func:`adapters.base.capabilities`), so the
listing imports each adapter's module and never its framework. The warnings the registry gives while it reads
the entry points (a plugin shadowed by a built-in of the same name, a plugin that cannot be loaded, a name
registered twice) are printed here as ``batchscope: warning:`` lines on stderr, after the table.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from harness.cli.table import print_table


@dataclass(frozen=True)
class AdapterRow:
    """One adapter as the listing shows it."""

    name: str
    builtin: bool
    api_version: int | None
    framework: str
    installed: bool
    version: str | None
    target: str
    has: tuple[str, ...]
    lacks: tuple[str, ...]
    problem: str | None


def _layers_summary(names: tuple[str, ...], layer_names: tuple[str, ...]) -> list[str]:
    """The layer hooks folded into one item ("all 8 layer hooks"), the other capabilities as they are."""
    layers = [n for n in names if n in layer_names]
    rest = [n for n in names if n not in layer_names]
    if len(layers) == len(layer_names):
        return [f"all {len(layer_names)} layer hooks", *rest]
    return [*layers, *rest]


def collect() -> tuple[list[AdapterRow], list[str]]:
    """Every registered adapter's row, and the registry's warnings (as text) given while reading them."""
    from adapters.base import API_VERSION, CAPABILITIES, capabilities
    from harness.registry import adapter_class, list_adapters, shadowed_plugins

    rows: list[AdapterRow] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = list_adapters()
        shadowed = shadowed_plugins()
        for info in infos:
            has: tuple[str, ...] = ()
            api: int | None = None
            if info.problem is None:
                cls = adapter_class(info.name)
                has, api = capabilities(cls), int(getattr(cls, "api_version", 1))
            # own_build is a fact about how it builds, not something to lack
            lacks = tuple(c.name for c in CAPABILITIES if c.name not in has and c.name != "own_build"
                          ) if info.problem is None else ()
            rows.append(AdapterRow(info.name, info.builtin, api, info.distribution, info.installed, info.version,
                                   info.target, has, lacks, info.problem))
    notes = list(dict.fromkeys(str(w.message) for w in caught))  # once each, in the order given
    for s in shadowed:  # said even when the registry warned in an earlier call of this process
        text = (f"plugin {s.target} ({s.origin}) registers the adapter name {s.name!r}, which is the built-in "
                f"adapter's ({s.used}); the built-in is used and the plugin is not")
        if not any(text in n for n in notes):
            notes.append(text)
    for row in rows:
        if row.api_version is not None and row.api_version > API_VERSION:
            notes.append(f"adapter {row.name!r} was written for plugin API {row.api_version}, newer than this "
                         f"batchscope's ({API_VERSION}); upgrade batchscope, or use a release of the plugin for API "
                         f"{API_VERSION}")
    return rows, notes


def _print_text(rows: list[AdapterRow]) -> None:
    from adapters.base import CAPABILITIES

    layer_names = tuple(c.name for c in CAPABILITIES if c.name.startswith("layer_"))
    table = [{"name": r.name, "kind": "built-in" if r.builtin else "plugin", "api": r.api_version,
              "framework": r.framework, "installed": "yes" if r.installed else "no", "version": r.version or "-",
              "target": r.target + (f"  ({r.problem})" if r.problem else "")} for r in rows]
    print_table(table, [("name", "adapter", ""), ("kind", "kind", ""), ("api", "api", "d"),
                        ("framework", "framework", ""), ("installed", "installed", ""), ("version", "version", ""),
                        ("target", "entry point", "")])
    print("\ncapabilities (detected from what each adapter overrides; docs/adapters.md, \"Plugin API version and "
          "capabilities\")")
    width = max((len(r.name) for r in rows), default=0)
    for r in rows:
        if r.problem:
            print(f"  {r.name:<{width}}  cannot be loaded: see the entry point above")
            continue
        print(f"  {r.name:<{width}}  has:   {', '.join(_layers_summary(r.has, layer_names)) or '(none)'}")
        print(f"  {'':<{width}}  lacks: {', '.join(_layers_summary(r.lacks, layer_names)) or '(nothing)'}")


def cmd_adapters(args: argparse.Namespace) -> int:
    """List the adapters; exit 0 whatever the warnings (a broken plugin is its own problem, not the listing's)."""
    from adapters.base import API_VERSION

    rows, notes = collect()
    if args.json:
        from harness.cli.jsonout import dumps

        print(dumps({"api_version": API_VERSION, "adapters": [vars(r) for r in rows], "warnings": notes},
                    indent=1, default=list))
    else:
        _print_text(rows)
    for note in notes:
        print(f"batchscope: warning: {note}", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add the ``adapters`` subcommand."""
    p = sub.add_parser("adapters", help="list registered adapters, their API version and capabilities "
                                        "(imports no framework)")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=cmd_adapters)
