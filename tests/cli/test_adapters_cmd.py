"""``batchscope adapters``: each adapter's kind, plugin API version and capabilities; shadowed names warned."""

from __future__ import annotations

import importlib.metadata as md
import json
import types

import pytest

from harness import registry
from harness.cli import main
from tests.fakes.adapter import FakeAdapter


class NewerPlugin(FakeAdapter):
    """A plugin written for a plugin API this batchscope does not know yet."""

    name = "newer"
    api_version = 99


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["adapters", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_listing_shows_kind_api_version_and_capabilities(capsys):
    code, out, err = _run(capsys)
    assert code == 0 and err == ""
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:5]}
    assert set(rows) == {"pytorch", "tensorflow", "mxnet", "jax"}
    assert all(row[1:3] == ["built-in", "2"] for row in rows.values()), rows
    jax_lines = out[out.index("\n  jax "):].splitlines()[1:3]
    assert "has:   all 8 layer hooks, batchnorm_state, oom_examples" in jax_lines[0]
    assert "lacks: accumulation, precisions, native_models" in jax_lines[1]


def test_json_lists_what_each_adapter_has_and_lacks(capsys, monkeypatch):
    real = dict(registry._entry_points())
    newer = md.EntryPoint(name="newer", value="tests.cli.test_adapters_cmd:NewerPlugin", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "newer": newer})
    code, out, err = _run(capsys, "--json")
    listing = json.loads(out)
    by_name = {a["name"]: a for a in listing["adapters"]}
    assert code == 0 and listing["api_version"] == 2
    assert by_name["pytorch"]["builtin"] and "native_models" in by_name["pytorch"]["has"]
    plugin = by_name["newer"]
    assert not plugin["builtin"] and plugin["api_version"] == 99
    assert "own_build" in plugin["has"] and "layer_residual" in plugin["lacks"]
    assert "written for plugin API 99, newer than this batchscope's (2)" in err


def test_a_plugin_shadowing_a_builtin_name_is_warned_and_the_builtin_listed(capsys, monkeypatch):
    builtin = next(ep for ep in md.entry_points(group=registry.GROUP) if ep.name == "jax")
    plugin = md.EntryPoint(name="jax", value="fastjax.adapter:FastJAX", group=registry.GROUP)._for(
        types.SimpleNamespace(name="batchscope-fastjax", version="0.3"))  # type: ignore[arg-type]
    monkeypatch.setattr(registry.md, "entry_points", lambda group: [plugin, builtin])
    registry.refresh()
    try:
        code, out, err = _run(capsys)
    finally:
        monkeypatch.undo()
        registry.refresh()
    assert code == 0
    assert "adapters.jax:JAXAdapter" in out and "fastjax" not in out
    assert ("batchscope: warning: plugin fastjax.adapter:FastJAX (from batchscope-fastjax 0.3) registers the adapter "
            "name 'jax', which is the built-in adapter's (adapters.jax:JAXAdapter); the built-in is used") in err
    assert "register it under a name of its own" in err


def test_a_plugin_that_cannot_be_loaded_is_listed_with_a_warning_and_the_listing_still_exits_0(capsys, monkeypatch):
    real = dict(registry._entry_points())
    broken = md.EntryPoint(name="broken", value="no_such_pkg.adapter:Thing", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "broken": broken})
    code, out, err = _run(capsys)
    assert code == 0
    assert "broken      cannot be loaded: see the entry point above" in out
    assert "batchscope: warning: adapter 'broken' (no_such_pkg.adapter:Thing) cannot be loaded" in err
