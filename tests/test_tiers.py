"""tests/tiers.py: which heavy tests a change selects (CI's second step), and the frameworks a run really ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]
EXHAUSTIVE = ("tests/maxbatch/test_maxbatch.py::test_model_and_double_bisect_agree_on_the_real_boundary",
              "tests/maxbatch/test_maxbatch.py::test_real_boundary_on_cpu_holds_in_fresh_workers_either_side_of_it",
              "tests/maxbatch/test_maxbatch_moving.py::"
              "test_an_exact_search_of_a_moving_boundary_stops_within_the_probe_bound",
              "tests/maxbatch/test_answer_holds.py::test_verify_passes_on_a_real_pytorch_worker")


def _heavy_selected(changed: str) -> tuple[int, list[str]]:
    """The heavy tests the real suite keeps for these changed files (``--collect-only``, as CI selects them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("BATCHSCOPE_TEST_RUN_DIR", "PYTEST_XDIST_WORKER")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--collect-only", "-m", "heavy", f"--changed-files={changed}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, [line for line in proc.stdout.splitlines() if line.startswith("tests/")]


@pytest.mark.process
def test_a_change_to_the_search_selects_the_exhaustive_searches_and_a_change_to_the_report_does_not() -> None:
    code, ids = _heavy_selected("harness/maxbatch/search.py")
    assert code == 0, ids
    assert set(EXHAUSTIVE) <= set(ids), ids
    assert not any("cuda_lock" in i or "ray_cluster" in i or "chaos" in i for i in ids), ids
    code, ids = _heavy_selected("report/document/figures.py,README.md")
    assert (code, ids) == (5, []), ids  # pytest's "no tests collected": .ci/run takes it as a pass


def test_a_path_guards_itself_and_what_lies_under_a_folder() -> None:
    guards = ("harness/maxbatch/", "adapters/pytorch/locks/cuda.txt")
    assert tiers.touches(guards, ["harness/maxbatch/search.py"])
    assert tiers.touches(guards, ["adapters/pytorch/locks/cuda.txt"])
    assert not tiers.touches(guards, ["harness/maxbatchx.py", "adapters/pytorch/adapter.py", "report/pages.py"])
    assert tiers.touches(("harness/maxbatch",), ["harness/maxbatch/probes.py"])  # the slash is optional


@pytest.mark.process  # git
def test_the_changes_are_git_s_since_the_recorded_commit_and_unknown_means_every_heavy_test(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "a.py").write_text("a\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    assert tiers.changed_since("recorded", tmp_path) is None  # no record yet: git cannot say, every heavy test runs
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "b.py").write_text("b\n")
    git("add", "-A")
    git("commit", "-qm", "two")
    (tmp_path / "harness" / "a.py").write_text("changed, not committed\n")
    (tmp_path / "new.py").write_text("untracked\n")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "test-all-passed").write_text(f"{first}  # make test-all passed here\n")
    assert tiers.changed_since("recorded", tmp_path) == [".ci/test-all-passed", "harness/a.py", "new.py",
                                                         "report/b.py"]
    assert tiers.changed_since("0" * 40, tmp_path) is None  # a commit this clone does not have


def test_a_heavy_test_guards_its_module_the_conftests_above_it_and_the_suites_own_files() -> None:
    class Item:
        nodeid = "tests/maxbatch/test_x.py::test_y"

        def get_closest_marker(self, name: str) -> pytest.Mark:
            return pytest.mark.heavy("harness/maxbatch/").mark

    guards = tiers.guarded_paths(Item())  # type: ignore[arg-type]
    assert guards[:4] == ("harness/maxbatch/", "tests/maxbatch/test_x.py", "tests/conftest.py",
                          "tests/maxbatch/conftest.py")
    assert set(tiers.EVERYTHING) <= set(guards)


def test_a_built_in_framework_that_missed_a_real_run_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    done = {"pytorch": set(tiers.REQUIRED), "jax": {"contract probe", "shared sweep", "environment"}}
    for framework, what in done.items():
        for w in what:
            (folder / "ran").mkdir(parents=True, exist_ok=True)
            (folder / "ran" / f"{framework}--{w.replace(' ', '_')}").touch()
    ran = tiers.what_ran(folder)
    assert ran == done
    assert tiers.missing(ran, ["jax", "pytorch", "mxnet"]) == {"jax": ["max-batch search"],
                                                               "mxnet": list(tiers.REQUIRED)}
    assert tiers.builtin_frameworks() == ["jax", "mxnet", "pytorch", "tensorflow"]


def test_the_frameworks_required_are_all_or_those_named() -> None:
    assert tiers.required_frameworks("") == []
    assert tiers.required_frameworks("all") == ["jax", "mxnet", "pytorch", "tensorflow"]
    # make test GPU=1: MXNet has no CUDA build
    assert tiers.required_frameworks("pytorch,tensorflow,jax") == ["jax", "pytorch", "tensorflow"]
