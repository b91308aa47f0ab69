"""Issue 38, item 8: every CUDA lock still resolves for Linux x86-64 (PyPI alone, this interpreter's version),
without installing it and without a GPU, so a lock that can no longer be installed is caught here. Needs the
package registries (CI has them); pip reads each wheel's metadata, not the GBs of CUDA libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.envs.locking import platform_flags
from harness.envs.spec import requirement_lines
from tests import ROOT

CUDA_LOCKS = sorted((ROOT / "adapters").glob("*/locks/cuda.txt"))


def test_the_cuda_locks_are_where_the_gpu_set_needs_them() -> None:
    assert [p.parent.parent.name for p in CUDA_LOCKS] == ["jax", "pytorch", "tensorflow"]  # MXNet has none


@pytest.mark.slow
@pytest.mark.parametrize("lock", CUDA_LOCKS, ids=lambda p: p.parent.parent.name)
def test_a_cuda_lock_resolves_for_linux_x86_64(lock: Path, tmp_path: Path) -> None:
    pins = requirement_lines(lock.read_text())
    assert pins and all("==" in p for p in pins), "a lock pins every distribution exactly"
    report = tmp_path / "report.json"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           *platform_flags(version), "--target", str(tmp_path / "t"), "--report", str(report),
                           "-r", str(lock)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    wanted = dict(p.split("==", 1) for p in pins)
    assert resolved == wanted  # the lock is the whole set: pip adds nothing and changes nothing
