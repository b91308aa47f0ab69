"""Issue 24 (max batch): a CPU budget above what the machine has is refused with the numbers, before anything
is written: on CPU the budget is RLIMIT_DATA on each probe, so a budget the machine cannot back ends the search
in the kernel's OOM killer (seen: ``--memory-limit-mib 99999999``), not in a probe's failed allocation. Refused,
not capped: a capped search answers another question than the one asked. Above the memory available now (but
not above the machine's): a note, since what is available moves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment

#: a search that is not refused runs to its end; these tests ask only that it is not refused, so a short one: a cap
#: on the size and a short settling run (each of the search's probes is a worker process of its own)
SHORT = ("--max-batch-cap", "16", "--settle-steps", "2")


def _meminfo_mib(key: str) -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} in /proc/meminfo")


def test_a_budget_above_physical_memory_is_refused(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", "99999999", "--out", str(tmp_path / "mb"))
    assert_refused(done, "--memory-limit-mib 99999999", "MiB of memory")
    assert not (tmp_path / "mb").exists()


@pytest.mark.process
def test_a_budget_above_the_memory_available_now_runs_with_a_note(tmp_path: Path) -> None:
    """Not refused (what is available moves: other processes come and go), but said."""
    total, available = _meminfo_mib("MemTotal"), _meminfo_mib("MemAvailable")
    if total - available < 64:
        pytest.skip(f"this machine has nearly all its memory available ({available:.0f} of {total:.0f} MiB): "
                    "no budget lies between the two")
    limit = int((total + available) / 2)
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", str(limit), *SHORT, "--out", str(tmp_path / "mb"))
    assert done.returncode == 0, done.stderr
    assert f"--memory-limit-mib {limit} is more than the" in done.stderr and "available now" in done.stderr


def test_a_sweeps_max_batch_budget_above_the_machine_is_refused_before_the_sweep(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, max_batch=True, memory_limit_mib=99999999)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "memory_limit_mib", "MiB of memory")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_budget_the_machine_has_still_runs(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", "1024", *SHORT, "--out", str(tmp_path / "mb"))
    assert done.returncode == 0, done.stderr
