"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.helpers import cli, fake_experiment, stop_started
from tests.helpers.processes import shared_run


@pytest.fixture(autouse=True)
def _no_command_outlives_its_test() -> Iterator[None]:
    """A command a test started and did not stop (the test failed first) is killed when the test ends."""
    yield
    stop_started()


@pytest.fixture(scope="session")
def finished_fake_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``results.sqlite`` of a finished fake run (experiment ``faults``: two batch sizes, two repeats), made once per
    worker for the modules that copy it and damage the copy (test_readonly_stores.py, test_store_faults.py)."""
    tmp = tmp_path_factory.mktemp("good")
    exp = fake_experiment(tmp, batch_sizes=[4, 8], repeats=2)
    with shared_run("finished_fake_store"):
        done = cli(tmp, "run", str(exp), "--out", str(tmp / "out"))
    assert done.returncode == 0, done.stderr
    return tmp / "out" / "results.sqlite"
