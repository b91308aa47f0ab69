"""Issue 13, items 9 and 10: a broken third-party adapter is listed with its problem (never a crash), and
an output path that cannot be written is refused with exit 2, the path and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.helpers import FAKE_ADAPTERS, assert_refused, cli, fake_experiment, rows

BROKEN = (FAKE_ADAPTERS + ",raising=tests.faults.raising_plugin:Adapter"
          + ",notadapter=tests.faults.broken_plugin:not_an_adapter")


@pytest.mark.process
@pytest.mark.parametrize("command", ["adapters", "doctor"])
def test_broken_plugins_are_listed_with_their_problem(tmp_path: Path, command: str) -> None:
    done = cli(tmp_path, command, adapters=BROKEN)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in ((0,) if command == "adapters" else (0, 1))  # doctor: 1 only for pin problems
    assert "raising" in done.stdout and "libfoo 3" in done.stdout
    assert "notadapter" in done.stdout and "is not an Adapter" in done.stdout
    assert "pytorch" in done.stdout  # the good ones are still listed


def test_out_that_is_an_existing_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.write_text("a file, not a directory\n")
    done = cli(tmp_path, "run", str(fake_experiment(tmp_path)), "--out", str(out))
    assert_refused(done, str(out), "not a directory")
    assert out.read_text() == "a file, not a directory\n"


def test_out_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    out = Path("/proc/batchscope-faults/out")  # cannot be created, even by root (a read-only file system)
    done = cli(tmp_path, "run", str(fake_experiment(tmp_path)), "--out", str(out))
    assert_refused(done, "/proc/batchscope-faults", "cannot create the output directory")


def test_maxbatch_out_that_is_an_existing_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.write_text("x\n")
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", "1024", "--out", str(out))
    assert_refused(done, str(out), "not a directory")


@pytest.mark.process
def test_report_onto_a_directory_named_pdf_is_refused_before_drawing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli(tmp_path, "run", str(fake_experiment(tmp_path)), "--out", str(out)).returncode == 0
    target = tmp_path / "report.pdf"
    target.mkdir()
    done = cli(tmp_path, "report", str(out), "-o", str(target))
    assert_refused(done, str(target), "not a file")
    assert not (tmp_path / "figures").exists()  # refused before figures were drawn beside it


@pytest.mark.process
def test_an_output_directory_removed_mid_run_is_reported_with_its_path(tmp_path: Path) -> None:
    """The store's directory disappears between two trials: exit 2 with the path, not a traceback."""
    import shutil
    import subprocess

    from tests.faults.helpers import start, wait_for, workers_of

    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[4, 64], timeout_s=3)  # bs 64 hangs, then times out
    proc = start(tmp_path, "run", str(exp), "--out", str(out), behaviour="hang_large")
    wait_for(lambda: (len(rows(out)) >= 1 and workers_of(proc.pid)) or proc.poll() is not None, 120,
             "the second trial to start")
    shutil.rmtree(out)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert "Traceback" not in err, err
    assert proc.returncode == 2 and str(out) in err, err


@pytest.mark.process
def test_a_full_disk_is_reported_with_the_path_and_finished_trials_kept(tmp_path: Path) -> None:
    """RLIMIT_FSIZE on the command (100 KiB) fails writes past it with EFBIG, as a full disk would.

    Measured: the store is 48 KiB after one trial of this experiment and 152 KiB after all 20 (how many sampler
    rows a trial adds depends on the machine's speed), so 100 KiB fails mid-run with trials kept, on a fast
    machine too; at 150 KiB a quiet machine's run could finish under the limit and exit 0.
    """
    import subprocess

    from tests.faults.helpers import command, env_for
    from tests.faults.launch import FSIZE_ENV

    out = tmp_path / "out"
    exp = fake_experiment(tmp_path, batch_sizes=[2, 4, 8, 16, 32], repeats=4)
    env = env_for(tmp_path) | {FSIZE_ENV: "100"}
    done = subprocess.run(command("run", str(exp), "--out", str(out)), env=env, capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert_refused(done, str(out / "results.sqlite"), "cannot write", "has space")
    kept = rows(out)
    assert 1 <= len(kept) < 20 and all(r["status"] == "ok" for r in kept)  # the stored trials survived
