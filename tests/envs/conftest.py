"""The environments' tests: fake adapters with requirements registered, and a folder of environments per test."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest

from harness import registry


@pytest.fixture()
def env_fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake adapter and the two with requirements, registered as plugins."""
    eps = dict(registry._entry_points())
    for name, value in (("fake", "tests.fakes.adapter:FakeAdapter"),
                        ("npenv", "tests.fakes.env_adapters:NumpyEnvAdapter"),
                        ("brokenenv", "tests.fakes.env_adapters:BrokenEnvAdapter")):
        eps[name] = md.EntryPoint(name=name, value=value, group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)
    yield


@pytest.fixture()
def envs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of managed environments of this test's own (BATCHSCOPE_ENVS)."""
    root = tmp_path / "envs"
    monkeypatch.setenv("BATCHSCOPE_ENVS", str(root))
    return root
