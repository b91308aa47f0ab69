"""Issue 38, item 3: a framework pointed at the user's own interpreter (``--python FRAMEWORK=PATH``,
``[environments]``), checked before the first trial; refused with exit 2 and nothing written where it cannot run."""

from __future__ import annotations

import json
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from harness.cli import main
from harness.store import Store
from tests.envs.test_faults import _toml
from tests.helpers.envs import python_for


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], *words: str) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.process
@pytest.mark.parametrize("case", ["missing", "not_python", "without_the_framework"])
def test_an_interpreter_that_cannot_run_the_framework_is_refused_and_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    if case == "missing":
        python, why = str(tmp_path / "no" / "python"), "does not exist"
    elif case == "not_python":  # an executable that is no Python: it runs, and prints nothing we can read
        python, why = "/bin/true", "does not run there"
    else:  # the parent's own interpreter: batchscope is there, PyTorch is not (since 0.2)
        python, why = sys.executable, "pytorch cannot run in"
    out = tmp_path / "out"
    _refused(capsys, ["run", str(_toml(tmp_path / "e.toml", ["pytorch"])), "--python", f"pytorch={python}",
                      "--out", str(out)], "pytorch", python, why)
    assert not out.exists()


@pytest.mark.process
def test_the_environments_table_is_checked_like_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = _toml(tmp_path / "e.toml", ["pytorch"])
    toml.write_text(toml.read_text() + f'\n[environments]\npytorch = "{sys.executable}"\n')
    _refused(capsys, ["run", str(toml), "--out", str(tmp_path / "out")], "environments.pytorch",
             "pytorch cannot run in")
    assert not (tmp_path / "out").exists()


def test_a_flag_for_a_framework_that_is_not_registered_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _refused(capsys, ["run", str(_toml(tmp_path / "e.toml", ["pytorch"])), "--python", "caffe=/usr/bin/python3",
                      "--out", str(tmp_path / "out")], "unknown adapter 'caffe'")
    _refused(capsys, ["run", str(_toml(tmp_path / "e.toml", ["pytorch"])), "--python", "/usr/bin/python3",
                      "--out", str(tmp_path / "out")], "FRAMEWORK=PATH")


@pytest.mark.slow
def test_a_trial_runs_in_the_users_own_interpreter_and_says_so(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A throwaway venv with one framework (the managed PyTorch environment's packages, added by a .pth file: no
    download) named with --python: the trial runs there, and its row names that interpreter and what it imported."""
    managed = Path(python_for("pytorch")).parents[1]
    site = next(managed.glob("lib/python*/site-packages"))
    user = tmp_path / "myvenv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(user)
    user_site = Path(sysconfig.get_path("purelib", vars={"base": str(user), "platbase": str(user)}))
    user_site.mkdir(parents=True, exist_ok=True)
    (user_site / "mytorch.pth").write_text(f"{site}\n")
    out = tmp_path / "out"
    code = main(["run", str(_toml(tmp_path / "e.toml", ["pytorch"])), "--python", f"pytorch={user}/bin/python",
                 "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"pytorch: user ({user}/bin/python" in printed.out
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "ok" and row["environment"] == "user" and row["python"] == f"{user}/bin/python"
    versions = json.loads(row["versions_json"])
    assert versions["torch"].startswith("2.") and versions["numpy"].startswith("2.")
