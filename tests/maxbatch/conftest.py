"""Fixtures of the max-batch tests."""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.memory_executor import LinearMemory, install
from tests.scheduling import alone_section


@pytest.fixture
def fake_executor(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[Any]]:
    """``fake_executor(killed_calls=(...), ...)``: install a LinearMemory; returns the list of executors made."""
    return lambda **kw: install(monkeypatch, lambda: LinearMemory(**kw))


@dataclass(frozen=True)
class RealSearch:
    """One real max-batch search, as ``batchscope maxbatch`` runs it, shared by the tests that read it."""

    out: Path
    code: int
    printed: str  # stdout and stderr of the command
    row: dict[str, Any]


#: the real search several tests read: PyTorch's tiny_cnn on 3x64x64 noise under a 400 MiB RLIMIT_DATA (~0.5 MiB a
#: sample, so the boundary lies at a few hundred samples), the default (model) strategy, then --verify
REAL_SEARCH_ARGS = ("maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
                    "--synthetic-shape", "3,64,64", "--memory-limit-mib", "400", "--threads", "1")


@pytest.fixture(scope="session")
def real_search(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> RealSearch:
    """The search once per session, however many tests read it (each of them carries
    ``xdist_group("real_search")``, so under xdist one worker runs them all and the search runs once)."""
    from harness.cli import main
    from harness.store import Store

    out = tmp_path_factory.mktemp("real_search") / "out"
    printed = io.StringIO()
    with alone_section(), redirect_stdout(printed), redirect_stderr(printed):  # its tests are `alone`, so it is
        code = main([*REAL_SEARCH_ARGS, "--verify", "--out", str(out)])
    with Store.open(out, create=False) as store:
        rows = store.maxbatch_results()
    assert len(rows) == 1, (rows, printed.getvalue()[-3000:])
    return RealSearch(out, code, printed.getvalue(), rows[0])
