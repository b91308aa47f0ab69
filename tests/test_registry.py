"""Listing adapters imports no framework; broken plugins warn instead of crashing."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import types

import pytest

from harness import registry
from harness.errors import AdapterError
from tests.fakes.registry import register_fake

FRAMEWORKS = tuple(sorted(registry.framework_modules()))  # every registered adapter's framework


def _modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.process
def test_listing_adapters_imports_no_framework():
    assert _modules_after("from harness.registry import list_adapters; a = list_adapters(); assert len(a) >= 3") == []


@pytest.mark.process
def test_cli_adapters_and_doctor_import_no_framework():
    code = ("import contextlib, io\nfrom harness.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['adapters']); main(['doctor'])")
    assert _modules_after(code) == []


@pytest.mark.process
def test_parsing_and_planning_import_no_framework():
    code = ("from harness.config.experiment import load_experiment\nfrom harness.run.planner import plan\n"
            "exp = load_experiment('experiments/quick.toml')")
    assert _modules_after(code) == []


def test_builtin_adapters_are_registered_and_their_frameworks_are_not_in_the_parent():
    """The built-ins are listed from the parent's metadata, where no framework is installed since 0.2: each runs in
    an environment of its own (harness.envs; `batchscope doctor` shows those)."""
    names = {a.name for a in registry.list_adapters()}
    assert {"pytorch", "tensorflow", "mxnet", "jax"} <= names
    torch_info = next(a for a in registry.list_adapters() if a.name == "pytorch")
    with pytest.raises(md.PackageNotFoundError):
        md.version("torch")
    assert torch_info.version is None and torch_info.builtin


def test_a_broken_plugin_warns_and_is_listed_with_its_problem(monkeypatch):
    real = dict(registry._entry_points())
    broken = md.EntryPoint(name="broken", value="no_such_pkg.adapter:Thing", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "broken": broken})
    with pytest.warns(RuntimeWarning, match="broken"):
        infos = registry.list_adapters()
    bad = next(a for a in infos if a.name == "broken")
    assert not bad.installed and "cannot be loaded" in (bad.problem or "")
    with pytest.raises(AdapterError, match="no adapter named 'nope'"):
        registry.adapter_target("nope")


def test_a_name_registered_twice_warns_and_names_both(monkeypatch):
    eps = [
        md.EntryPoint(name="dup", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP),
        md.EntryPoint(name="dup", value="other_pkg.adapter:Other", group=registry.GROUP),
    ]
    monkeypatch.setattr(registry.md, "entry_points", lambda group: eps)
    registry.refresh()
    try:
        with pytest.warns(RuntimeWarning, match="'dup' is registered twice: tests.fakes.adapter:FakeAdapter"):
            assert registry.adapter_target("dup") == "other_pkg.adapter:Other"
    finally:
        monkeypatch.undo()
        registry.refresh()  # forget the fake group for the tests after this one
    assert "dup" not in registry.known_adapter_names()


def test_a_class_whose_name_differs_from_its_entry_point_warns(monkeypatch):
    real = dict(registry._entry_points())
    renamed = md.EntryPoint(name="notfake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "notfake": renamed})
    with pytest.warns(RuntimeWarning, match="declares name = 'fake'; set the class's name to 'notfake'"):
        registry.adapter_class("notfake")


def _from(dist_name: str, ep: md.EntryPoint) -> md.EntryPoint:
    """``ep`` as if installed by the distribution ``dist_name``."""
    return ep._for(types.SimpleNamespace(name=dist_name, version="0.3"))  # type: ignore[arg-type]


@pytest.mark.parametrize("plugin_first", [True, False])
def test_a_plugin_registering_a_builtin_name_is_shadowed_with_a_warning(monkeypatch, plugin_first):
    """The built-in keeps its name whichever entry point is found first; the plugin is listed as shadowed."""
    builtin = next(ep for ep in md.entry_points(group=registry.GROUP) if ep.name == "jax")
    plugin = _from("batchscope-fastjax", md.EntryPoint(name="jax", value="fastjax.adapter:FastJAX",
                                                       group=registry.GROUP))
    monkeypatch.setattr(registry.md, "entry_points", lambda group: [plugin, builtin] if plugin_first
                        else [builtin, plugin])
    registry.refresh()
    try:
        with pytest.warns(RuntimeWarning, match=r"fastjax.adapter:FastJAX \(from batchscope-fastjax 0.3\) registers "
                                                r"the adapter name 'jax', which is the built-in adapter's"):
            assert registry.adapter_target("jax") == "adapters.jax:JAXAdapter"
        assert registry.shadowed_plugins() == (registry.Shadowed("jax", "fastjax.adapter:FastJAX",
                                                                 "from batchscope-fastjax 0.3", builtin.value),)
        assert registry.is_builtin("jax") and not registry.is_builtin("fastjax.adapter:FastJAX")
    finally:
        monkeypatch.undo()
        registry.refresh()
    assert registry.shadowed_plugins() == ()


def test_builtins_are_told_apart_from_plugins(monkeypatch):
    infos = {a.name: a for a in registry.list_adapters()}
    assert all(infos[n].builtin for n in ("pytorch", "tensorflow", "mxnet", "jax"))
    register_fake(monkeypatch)
    assert not registry.is_builtin("fake") and not next(a for a in registry.list_adapters() if a.name == "fake").builtin
