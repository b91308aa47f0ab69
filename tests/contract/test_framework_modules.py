"""Which modules are frameworks comes from the registry: a fifth adapter's framework is known once it is registered.

The list used to be kept by hand in four places (the contract suite, the layering test, the report test and the
user-model guard), so an adapter for a fifth framework that imported it at module level passed the contract's
"imports no framework at module level" check. These tests start no framework (``fifthfw`` is a stand-in).
"""

from __future__ import annotations

import importlib.metadata as md

import pytest

from harness import registry
from tests import ROOT
from tests.contract import verdicts
from tests.contract.conftest import import_loads

FIFTH_MODULE = "tests.contract.broken.fifth_toplevel"
FIFTH_FRAMEWORK_DIR = ROOT / "tests" / "fakes" / "frameworks"


@pytest.fixture()
def fifth_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fifthfw`` importable here and in the interpreters the check starts."""
    monkeypatch.syspath_prepend(str(FIFTH_FRAMEWORK_DIR))
    monkeypatch.setenv("PYTHONPATH", str(FIFTH_FRAMEWORK_DIR))


def _register_fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    real = dict(registry._entry_points())
    fifth = md.EntryPoint(name="fifth", value=f"{FIFTH_MODULE}:FifthTopLevel", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "fifth": fifth})


def test_every_builtin_framework_comes_from_the_registry():
    modules = registry.framework_modules()
    for name in ("pytorch", "tensorflow", "mxnet", "jax"):
        cls = registry.adapter_class(name)
        assert cls.import_name in modules and set(cls.framework_modules) <= modules, (name, sorted(modules))


@pytest.mark.process
def test_a_registered_fifth_adapter_importing_its_framework_at_module_level_is_named(monkeypatch, fifth_on_path):
    assert "fifthfw" not in registry.framework_modules()
    _register_fifth(monkeypatch)
    assert "fifthfw" in registry.framework_modules()
    message = verdicts.imports_no_framework(FIFTH_MODULE, import_loads(FIFTH_MODULE))  # the registry's list alone
    assert message is not None and "loaded fifthfw" in message, message


@pytest.mark.process
def test_an_unregistered_adapter_given_as_module_class_is_judged_by_its_own_import_name(fifth_on_path):
    assert "fifthfw" not in registry.framework_modules()
    message = verdicts.imports_no_framework(FIFTH_MODULE, import_loads(FIFTH_MODULE, "FifthTopLevel"))
    assert message is not None and "loaded fifthfw" in message, message


@pytest.mark.process
def test_a_clean_module_loads_no_framework(fifth_on_path):
    assert import_loads("tests.fakes.adapter", "FakeAdapter") == ["numpy"]  # the fake's "framework" is NumPy
    assert import_loads("adapters.base") == []
