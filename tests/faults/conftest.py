"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.helpers import stop_started


@pytest.fixture(autouse=True)
def _no_command_outlives_its_test() -> Iterator[None]:
    """A command a test started and did not stop (the test failed first) is killed when the test ends."""
    yield
    stop_started()
