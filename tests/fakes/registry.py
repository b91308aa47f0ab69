"""Register the framework-free fake adapter as if a third party had installed it (tests only)."""

from __future__ import annotations

import importlib.metadata as md

import pytest

from harness import registry


def register_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    real = dict(registry._entry_points())
    fake = md.EntryPoint(name="fake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, "fake": fake})
