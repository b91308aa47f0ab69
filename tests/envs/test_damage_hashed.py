"""A hashed lock's pins are read as versions by the damage check (issue 50 items 4 and 7 together).

A lock line is ``name==version --hash=sha256:...``; the check once took everything after ``==`` as the version, so
every package of a hashed lock read as "not installed" and every command rebuilt the environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.envs.build import FACTS_FILE, damage, python_in
from harness.envs.spec import EnvSpec

PINS = ("numpy==2.4.6 --hash=sha256:" + "a" * 64 + " --hash=sha256:" + "b" * 64,
        "torch==2.13.0 --hash=sha256:" + "c" * 64 + ' ; sys_platform == "linux"')


def _env(tmp_path: Path, installed: dict[str, str]) -> tuple[Path, EnvSpec]:
    spec = EnvSpec("pytorch", "cpu", PINS, "cpu.txt", "torch", locked=True)
    env_dir = tmp_path / "env"
    python = python_in(env_dir)
    python.parent.mkdir(parents=True)
    os.symlink("/bin/true", python)
    site = env_dir / "lib" / "python3.11" / "site-packages"
    for name, version in installed.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    (env_dir / FACTS_FILE).write_text(json.dumps({"requirements": list(spec.requirements)}))
    return env_dir, spec


def test_a_hashed_lock_installed_at_its_pins_is_not_damaged(tmp_path: Path) -> None:
    env_dir, spec = _env(tmp_path, {"numpy": "2.4.6", "torch": "2.13.0+cpu"})  # a local label counts as the pin
    assert damage(env_dir, spec) is None


def test_a_hashed_pin_at_another_version_is_named_without_its_hashes(tmp_path: Path) -> None:
    env_dir, spec = _env(tmp_path, {"numpy": "2.4.5", "torch": "2.13.0"})
    harm = damage(env_dir, spec)
    assert harm == "not installed: numpy 2.4.6 (found 2.4.5)"
