"""Issue 38, item 8: every CUDA lock still resolves for Linux x86-64 (PyPI alone, this interpreter's version),
without installing it and without a GPU, so a lock that can no longer be installed is caught here; and (issue 50,
item 7) the file pip takes for each pin is one whose hash the lock lists. Needs the package registries (CI has
them); pip reads each wheel's metadata and the index's hashes, not the GBs of CUDA libraries: it is given the pins
alone (with the lock's hashes, pip's hash-checking mode would download every wheel to check it)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.envs.locking import platform_flags
from harness.envs.spec import hashes_of, pin_of, requirement_lines
from tests import ROOT

CUDA_LOCKS = sorted((ROOT / "adapters").glob("*/locks/cuda.txt"))


def test_the_cuda_locks_are_where_the_gpu_set_needs_them() -> None:
    assert [p.parent.parent.name for p in CUDA_LOCKS] == ["jax", "pytorch", "tensorflow"]  # MXNet has none


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, tuple[subprocess.Popen[str], Path]]]:
    """pip's dry-run resolution of every CUDA lock, all started at once: each waits ~30 s on the package index, not on
    this machine (issue 42: three in a row held one xdist worker ~100 s), and each test reads its own."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    started: dict[Path, tuple[subprocess.Popen[str], Path]] = {}
    try:
        for lock in CUDA_LOCKS:
            tmp = tmp_path_factory.mktemp(lock.parent.parent.name)
            report, pins = tmp / "report.json", tmp / "pins.txt"
            pins.write_text("".join(f"{'=='.join(pin_of(line))}\n" for line in requirement_lines(lock.read_text())))
            started[lock] = (subprocess.Popen(
                [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                 *platform_flags(version), "--target", str(tmp / "t"), "--report", str(report), "-r", str(pins)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), report)
        yield started
    finally:
        for proc, _ in started.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.heavy("harness/envs/", "adapters/pytorch/locks/", "adapters/tensorflow/locks/", "adapters/jax/locks/",
                   "adapters/mxnet/locks/")  # the package index's time
@pytest.mark.parametrize("lock", CUDA_LOCKS, ids=lambda p: p.parent.parent.name)
def test_a_cuda_lock_resolves_for_linux_x86_64(
        lock: Path, resolutions: dict[Path, tuple[subprocess.Popen[str], Path]]) -> None:
    lines = requirement_lines(lock.read_text())
    wanted = dict(pin_of(line) for line in lines)  # raises where a line is not an exact pin
    proc, report = resolutions[lock]
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    installed = json.loads(report.read_text())["install"]
    resolved = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in installed}
    assert resolved == wanted  # the lock is the whole set: pip adds nothing and changes nothing
    listed = {pin_of(line)[0]: hashes_of(line) for line in lines}
    for item in installed:  # the file pip takes on Linux x86-64 is one the lock accepts
        name = item["metadata"]["name"].lower().replace("_", "-")
        assert item["download_info"]["archive_info"]["hashes"]["sha256"] in listed[name], name
