"""Issue 32: a full disk at every point where batchscope writes, on a real full file system (a 1 MiB tmpfs).

Each case says the disk is full (the path, the space left), keeps what was finished, leaves nothing half-written
under a name a later command would take as complete, and, once space is freed, the same command (with ``--resume``
for ``run``) finishes the work. The disk fills at a chosen moment: before the command (the store, the cache, the
resolved experiment, the report, the export), or from inside a trial, by the fake adapter (``FILL_DISK_ENV``: the
first step of a chosen batch size fills the disk, optionally then prints, so that the parent's next write fails).

Mounting needs root (CI runs the suite as root); where it cannot mount, each test is skipped saying why.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ROOT
from tests.fakes.adapter import FILL_DISK_ENV, fill_disk
from tests.faults.helpers import assert_refused, cli, command, env_for, fake_experiment, rows
from tests.helpers.processes import shared_run

DISK_MIB = 1
FULL = "the disk is full"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own, unmounted at the end whatever happens."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is a tmpfs mounted for the test, which needs root (CI runs the suite as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): a container without "
                    "CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(disk: Path, leave_kib: int = 0) -> Path:
    """Fill ``disk``, then give back ``leave_kib``."""
    filler = disk / "filler"
    written = fill_disk(str(filler))
    os.truncate(filler, max(written - leave_kib * 1024, 0))
    return filler


def _integrity(out: Path) -> str:
    conn = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def _temporaries(directory: Path) -> list[str]:
    """Names of what a writer stopped half-way would leave (temporary names, journals)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                  if ".tmp" in p.name or ".report-" in p.name or p.name.endswith("-journal"))


def _cells(out: Path) -> list[tuple[int, int]]:
    return sorted((r["batch_size"], r["repeat"]) for r in rows(out))


def _armed(tmp_path: Path, disk: Path, at_batch: int, then_print: int = 0) -> dict[str, str]:
    """The environment that makes the first trial of ``at_batch`` (or larger) fill ``disk``, once."""
    arm = tmp_path / "arm"
    arm.touch()
    spec = f"{arm}:{disk / 'filler'}:{at_batch}" + (f":{then_print}" if then_print else "")
    return {FILL_DISK_ENV: spec}


@pytest.mark.process
@pytest.mark.parametrize("leave_kib", [0, 12], ids=["full", "12-KiB-free"])
def test_a_store_that_cannot_be_created_says_the_disk_is_full_and_leaves_no_empty_store(
        tmp_path: Path, disk: Path, leave_kib: int) -> None:
    """Finding 2 (with 12 KiB free, as found): "cannot be read as a results store (database or disk is full) ...
    damaged", and a 0-byte results.sqlite left behind."""
    out = disk / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8])
    filler = _fill(disk, leave_kib)
    done = cli(tmp_path, "run", str(exp), "--out", str(out))
    assert_refused(done, str(out / "results.sqlite"), FULL)
    assert "damaged" not in done.stderr
    assert not (out / "results.sqlite").exists() and _temporaries(disk) == []
    filler.unlink()
    again = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    assert _cells(out) == [(4, 0), (8, 0)]


@pytest.mark.process
def test_a_trial_row_that_does_not_fit_keeps_the_rows_before_and_resume_finishes(tmp_path: Path, disk: Path) -> None:
    out = disk / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8, 16])
    done = cli(tmp_path, "run", str(exp), "--out", str(out), extra=_armed(tmp_path, disk, 8))
    assert_refused(done, str(out / "results.sqlite"), FULL, "--resume")
    assert _cells(out) == [(4, 0)] and _integrity(out) == "ok"  # the trial before is kept, the store whole
    (disk / "filler").unlink()
    again = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    assert _cells(out) == [(4, 0), (8, 0), (16, 0)] and _integrity(out) == "ok"  # each stored once


@pytest.mark.process
def test_a_worker_log_that_does_not_fit_stops_the_sweep_saying_so_and_resume_finishes(
        tmp_path: Path, disk: Path) -> None:
    out = disk / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8, 16])
    done = cli(tmp_path, "run", str(exp), "--out", str(out), extra=_armed(tmp_path, disk, 8, then_print=65536))
    assert_refused(done, str(out / "logs" / "worker-"), ".log", FULL, "--resume")
    assert _cells(out) == [(4, 0)] and _integrity(out) == "ok"
    assert list((out / "logs").glob("*.log")) == []  # half a log is not left to read as the whole
    (disk / "filler").unlink()
    again = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    assert _cells(out) == [(4, 0), (8, 0), (16, 0)]


@pytest.mark.process
@pytest.mark.parametrize("leave_kib", [0, 148], ids=["refused-up-front", "full-while-writing"])
def test_a_prepared_data_copy_that_does_not_fit_is_removed_and_nothing_is_written(tmp_path: Path, disk: Path,
                                                                                 leave_kib: int) -> None:
    """512 + 64 samples of 1x8x8 floats: 144 KiB of images, checked before the preparation; with 148 KiB free the
    check passes and the copy (the images, labels, headers and meta.json: 168 KiB in 4 KiB pages) does not fit."""
    cache, out = disk / "cache", tmp_path / "out"
    exp = fake_experiment(tmp_path, synthetic_samples=512)
    env = env_for(tmp_path) | {"BATCHSCOPE_CACHE": str(cache)}
    cache.mkdir()
    filler = _fill(disk, leave_kib)

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command("run", str(exp), "--out", str(out), *extra), cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    done = run()
    assert_refused(done, str(cache), FULL, "needed" if leave_kib else "needs")
    assert not out.exists() and [p for p in cache.rglob("*") if not p.is_dir()] == []  # no partial copy to trust
    filler.unlink()
    again = run("--resume")
    assert again.returncode == 0, again.stderr
    assert _cells(out) == [(4, 0)]


@pytest.mark.process
def test_a_resolved_experiment_that_does_not_fit_keeps_the_one_before(tmp_path: Path, disk: Path) -> None:
    out = disk / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 8])
    first = cli(tmp_path, "run", str(exp), "--out", str(out), "--batch-sizes", "4")
    assert first.returncode == 0, first.stderr
    resolved = out / "faults.resolved.json"
    before = resolved.read_bytes()
    filler = _fill(disk)
    done = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    assert_refused(done, str(resolved), FULL, "--resume")
    assert resolved.read_bytes() == before and _temporaries(out) == []
    assert _cells(out) == [(4, 0)] and _integrity(out) == "ok"
    filler.unlink()
    again = cli(tmp_path, "run", str(exp), "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    assert _cells(out) == [(4, 0), (8, 0)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished fake sweep on an ordinary disk, to report and export onto a full one."""
    tmp = tmp_path_factory.mktemp("finished")
    exp = fake_experiment(tmp, batch_sizes=[4, 8], repeats=2, eval=True, eval_points=1)
    with shared_run("finished"):
        done = cli(tmp, "run", str(exp), "--out", str(tmp / "out"))
    assert done.returncode == 0, done.stderr
    return tmp / "out"


@pytest.mark.process
def test_figures_and_the_pdf_that_do_not_fit_leave_the_report_before_as_it_was(
        tmp_path: Path, disk: Path, finished: Path) -> None:
    target = disk / "report" / "report.pdf"
    target.parent.mkdir()
    target.write_bytes(b"%PDF- the report of yesterday")
    filler = _fill(disk)
    done = cli(tmp_path, "report", str(finished), "-o", str(target))
    assert_refused(done, str(target), FULL, "run the command again")
    assert target.read_bytes() == b"%PDF- the report of yesterday"  # not replaced by half a report
    assert _temporaries(disk) == [] and not (target.parent / "figures").exists()
    filler.unlink()
    again = cli(tmp_path, "report", str(finished), "-o", str(target))
    assert again.returncode == 0, again.stderr
    assert target.read_bytes().startswith(b"%PDF-1") and list((target.parent / "figures").iterdir())


@pytest.mark.process
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_export_that_does_not_fit_leaves_no_half_written_table(tmp_path: Path, disk: Path, finished: Path,
                                                                   fmt: str) -> None:
    pytest.importorskip("pyarrow") if fmt == "parquet" else None
    target = disk / "export"
    filler = _fill(disk)
    done = cli(tmp_path, "export", str(finished), "--format", fmt, "-o", str(target))
    assert_refused(done, str(target), FULL, "run the command again")
    assert _temporaries(disk) == []
    assert not any(p.stat().st_size == 0 for p in target.glob(f"*.{fmt}"))  # whatever is there is whole
    filler.unlink()
    again = cli(tmp_path, "export", str(finished), "--format", fmt, "-o", str(target))
    assert again.returncode == 0, again.stderr
    assert (target / f"trials.{fmt}").stat().st_size > 0


@pytest.mark.process
def test_a_max_batch_result_that_does_not_fit_says_so_and_keeps_the_store_whole(tmp_path: Path, disk: Path) -> None:
    out = disk / "mb"
    args = ("maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
            "--memory-limit-mib", "1024", "--max-batch-cap", "64", "--out", str(out))
    done = cli(tmp_path, *args, extra=_armed(tmp_path, disk, 16))
    assert_refused(done, str(out / "results.sqlite"), FULL, "run the same command again")
    assert _integrity(out) == "ok" and _temporaries(disk) == []
    (disk / "filler").unlink()
    again = cli(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    conn = sqlite3.connect(out / "results.sqlite")
    try:
        assert conn.execute("SELECT COUNT(*) FROM maxbatch").fetchone()[0] == 1
    finally:
        conn.close()
