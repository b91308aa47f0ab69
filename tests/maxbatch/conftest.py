"""Fixtures of the max-batch tests."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.memory_executor import LinearMemory, install
from tests.helpers.shared import once
from tests.scheduling import alone_section


@pytest.fixture(autouse=True)
def gpu_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests fake a GPU machine (a GPU list for NVML); its frameworks are faked as their CUDA builds too, so
    that ``device = "auto"`` resolves to the GPU there (harness/run/devices.py) whatever builds this machine has.
    A test of a CPU-only build beside a GPU patches ``build_of`` again."""
    from harness.run import devices

    monkeypatch.setattr(devices, "build_of", lambda framework: (True, "CUDA (faked: a GPU machine's build)"))


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


#: the allocator setting the exactness tests run under. The search is exact for a memory law that is monotone and
#: repeats from one fresh process to the next: glibc's fixed mmap threshold gives one (to CPU_PEAK_JITTER_MIB); under
#: glibc's default the law moves by tens of MiB between processes (docs/maxbatch.md, issue 22), which the settling
#: runs and the --verify test (test_answer_holds.py) are about instead
FIXED_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@contextmanager
def fixed_threshold() -> Iterator[None]:
    """The workers started in the block inherit :data:`FIXED_THRESHOLD` from this process's environment, as they
    would from a user's shell (and the run records it as inherited)."""
    before = {k: os.environ.get(k) for k in FIXED_THRESHOLD}
    os.environ.update(FIXED_THRESHOLD)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def real_search(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> RealSearch:
    """The search once per session under :data:`FIXED_THRESHOLD`, however many tests read it (their module is one
    unit of work, tests/scheduling.py's ``SHARED_UNITS``, so under xdist one worker runs them all and the search runs
    once)."""
    from harness.cli import main
    from harness.store import Store

    out = tmp_path_factory.mktemp("real_search") / "out"
    printed = io.StringIO()
    # its tests are `alone`, so it is too
    with once("real_search"), alone_section(), fixed_threshold(), redirect_stdout(printed), redirect_stderr(printed):
        code = main([*REAL_SEARCH_ARGS, "--out", str(out)])
    with Store.open(out, create=False) as store:
        rows = store.maxbatch_results()
    assert len(rows) == 1, (rows, printed.getvalue()[-3000:])
    return RealSearch(out, code, printed.getvalue(), rows[0])
