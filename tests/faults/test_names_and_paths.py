"""Issue 24 (names and paths): an experiment name or an output path a user can type never writes somewhere
else than asked, never half-writes, and is refused (exit 2, nothing written) with the option named.

Commands run in a scratch current directory, so a name that would resolve to ``.`` shows up there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment
from tests.helpers.processes import shared_run


def _written(cwd: Path) -> list[str]:
    """What a command left in its current directory (the experiment file aside)."""
    return sorted(p.name for p in cwd.iterdir() if p.suffix != ".toml")


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "x" * 10_000, "y" * 101],
                         ids=["dotdot", "dot", "leading-dot", "10000-chars", "101-chars"])
def test_an_unusable_experiment_name_is_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    exp = fake_experiment(cwd, name="e")
    exp.write_text(exp.read_text().replace('name = "e"', f'name = "{name}"'))
    done = cli(tmp_path, "run", str(exp), cwd=cwd)
    assert_refused(done, "name")
    assert _written(cwd) == []


def test_a_long_name_with_an_explicit_out_writes_nothing(tmp_path: Path) -> None:
    """It failed after the store and the lock were written (the resolved spec's file name was too long)."""
    exp = fake_experiment(tmp_path, name="e")
    exp.write_text(exp.read_text().replace('name = "e"', f'name = "{"z" * 300}"'))
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "name")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_name_of_100_characters_still_runs(tmp_path: Path) -> None:
    """The guard: the limit leaves ordinary long names alone."""
    exp = fake_experiment(tmp_path, name="e")
    exp.write_text(exp.read_text().replace('name = "e"', f'name = "{"n" * 100}"'))
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "results.sqlite").is_file()


EMPTY_PATHS = {
    "run --out": lambda exp: ["run", str(exp), "--out", ""],
    "maxbatch --out": lambda exp: ["maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape",
                                   "1,8,8", "--memory-limit-mib", "4096", "--out", ""],
    "compare DIR": lambda exp: ["compare", ""],
    "recommend DIR": lambda exp: ["recommend", ""],
    "report DIR": lambda exp: ["report", ""],
    "export DIR": lambda exp: ["export", ""],
    "report -o": lambda exp: ["report", "{store}", "-o", ""],
    "export -o": lambda exp: ["export", "{store}", "-o", ""],
}


@pytest.fixture(scope="module")
def a_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("store")
    with shared_run("a_store"):
        done = cli(tmp, "run", str(fake_experiment(tmp)), "--out", str(tmp / "out"))
    assert done.returncode == 0, done.stderr
    return tmp / "out"


@pytest.mark.parametrize("case", sorted(EMPTY_PATHS))
def test_an_empty_path_is_refused_not_read_as_the_default_or_the_current_directory(tmp_path: Path, a_store: Path,
                                                                                   case: str) -> None:
    """``--out ""`` (an unset shell variable) wrote into ./results; ``compare ""`` read the current directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "results.sqlite").write_bytes((a_store / "results.sqlite").read_bytes())  # a store it must not read
    exp = fake_experiment(cwd)
    args = [a.format(store=a_store) for a in EMPTY_PATHS[case](exp)]
    done = cli(tmp_path, *args, cwd=cwd)
    assert_refused(done, "empty")
    assert case.split()[1] in done.stderr  # the option (or DIR) named
    assert _written(cwd) == ["results.sqlite"]
    assert sorted(p.name for p in a_store.iterdir()) == sorted(["results.sqlite", "logs", "faults.resolved.json",
                                                                ".batchscope.lock"])
