"""Fixtures of the max-batch tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.memory_executor import LinearMemory, install


@pytest.fixture
def fake_executor(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[Any]]:
    """``fake_executor(killed_calls=(...), ...)``: install a LinearMemory; returns the list of executors made."""
    return lambda **kw: install(monkeypatch, lambda: LinearMemory(**kw))
