"""tests/helpers/shared.py: a shared real run counted, and a second one in the same worker refused, naming it."""

from __future__ import annotations

import pytest

from tests.helpers.shared import RUNS, once


def test_a_shared_run_is_counted_and_a_second_in_the_same_worker_fails_naming_it() -> None:
    name = "test_shared_runs: a made-up shared run"
    try:
        with once(name):
            pass
        assert RUNS[name] == 1
        with pytest.raises(AssertionError, match="made-up shared run.*2 times"), once(name):
            raise AssertionError("not reached: the second run is refused before its work")
    finally:
        del RUNS[name]
