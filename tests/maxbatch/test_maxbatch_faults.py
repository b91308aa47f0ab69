"""Max batch when something goes wrong (issue 13): a one-off crash, a tiny answer, Ctrl-C.

No framework runs here: the executor is a stand-in whose memory law and faults the test sets, so each case is
exact and fast. The real boundary is tested in test_maxbatch.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.cli import main
from harness.cli.maxbatch import print_result
from harness.maxbatch.advice import CPU_PEAK_JITTER_MIB, jitter_advice
from harness.maxbatch.searching import MaxBatchSearch
from harness.records import MaxBatchResult
from harness.run.sweep import SweepOptions
from harness.store import Store
from harness.store.maxbatch_row import maxbatch_record
from tests.fakes.memory_executor import BUDGET_MIB


def _maxbatch(out: Any, *extra: str) -> int:
    return main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
                 "--memory-limit-mib", f"{BUDGET_MIB:g}", "--threads", "1", "--out", str(out), *extra])


def test_a_one_off_killed_probe_is_rerun_at_the_same_budget_not_blamed_on_memory(fake_executor, tmp_path, capsys):
    made = fake_executor(killed_calls=(1,))  # the very first worker (batch 1) is killed once
    code = _maxbatch(tmp_path / "out")
    captured = capsys.readouterr()
    assert code == 0, captured.err  # before the fix: exit 3, "does not fit even at batch 1"
    with Store.open(tmp_path / "out", create=False) as store:
        row = store.maxbatch_results()[0]
    assert row["max_batch"] == 28 and row["first_fail_batch"] == 29, row
    batch1 = json.loads(row["probes_json"])[0]  # the probe tells what happened to its first worker
    assert batch1["status"] == "ok" and "crashed once (killed by SIGKILL" in batch1["reason"]
    assert "then at the same budget: ok" in batch1["reason"]
    # the second worker was the same probe under the same budget, not a control run under a larger one
    first, second = made[0].units[:2]
    # the search's first probe: model's larger fit size, whose figure anchors the adapter's estimate (issue 41)
    assert (first.trial.batch_size, second.trial.batch_size) == (16, 16)
    assert first.os_memory_limit_mib == second.os_memory_limit_mib == BUDGET_MIB


def test_a_crash_that_repeats_at_the_budget_still_asks_the_control_run(fake_executor, tmp_path, capsys):
    # killed twice at the second probe's size (calls 2 and 3): the control run under a larger limit passes, so the
    # search takes it as memory, as before; the answer then lies below it, found by the probes that follow
    made = fake_executor(killed_calls=(2, 3))
    assert _maxbatch(tmp_path / "out") == 0, capsys.readouterr().err
    limits = [(u.trial.batch_size, u.os_memory_limit_mib) for u in made[0].units[:4]]
    second = limits[1][0]
    assert limits[:3] == [(16, BUDGET_MIB), (second, BUDGET_MIB), (second, BUDGET_MIB)] and second != 16
    assert limits[3][0] == second and limits[3][1] > BUDGET_MIB


def _tiny_row(max_batch: int, recommended: int | None = None, **kw: Any) -> MaxBatchResult:
    probes = [{"batch": max_batch, "status": "ok", "peak_mib": 479.5, "confirm": True},
              {"batch": max_batch + 1, "status": "oom", "peak_mib": None}]
    row = {"budget_kind": "cpu-rlimit-data", "budget_mib": 480.0, "margin_mib": 0.0, "max_batch": max_batch,
           "fit_a_mib": 470.0, "fit_b_mib_per_sample": 0.5, "analytic_activation_mib_per_sample": 1.0,
           "probes_json": json.dumps(probes), "first_fail_batch": max_batch + 1, "first_fail_status": "oom",
           "first_fail_reason": "can't allocate memory", "recommended_batch": max_batch, "recommended_pow2": 4,
           "recommended_mult8": None, "probes_n": 6, "wall_s": 10.0, "strategy": "model", "formula_batch": 8,
           "formula_error_pct": 100.0, "model_state_mib": 1.0, "per_sample_activation_mib": 0.5,
           "formula_analytic_batch": 4, "formula_analytic_error_pct": 0.0, "capped": 0}
    return maxbatch_record(row | kw)


def test_the_jitter_note_never_recommends_batch_0():
    # 3 MiB at 0.5 MiB per sample is 6 samples: more than the answer of 4 has
    advice = jitter_advice(_tiny_row(4))
    assert advice is not None
    assert "0 leaves" not in advice and " 0 " not in advice, advice  # before the fix: "0 leaves a 3 MiB margin"
    assert "larger --memory-limit-mib" in advice and f"{CPU_PEAK_JITTER_MIB:g} MiB" in advice
    # an answer with room for the margin still gets the size that leaves it
    assert "94 leaves a margin of 3 MiB" in (jitter_advice(_tiny_row(100)) or "")
    # JAX's fresh workers move further on CPU (advice.CPU_PEAK_JITTER_MIB_OF): its advice leaves 8 MiB, 16 samples
    jax = jitter_advice(_tiny_row(100, framework="jax")) or ""
    assert "moves by 1-8 MiB" in jax and "84 leaves a margin of 8 MiB" in jax, jax


def test_a_recommendation_of_nothing_is_said_in_words(capsys):
    row = _tiny_row(4, recommended_batch=0, recommended_pow2=0, margin_jitter_mib=3.0, margin_growth_mib=0.0,
                    margin_total_mib=3.0, train_env_json="{}")
    print_result(row)
    out = capsys.readouterr().out
    assert "recommended leaving 3.0 MiB unused" in out and "none: no batch size leaves that margin" in out
    assert "recommended: 0" not in out and ": 0  (power" not in out


def test_ctrl_c_in_maxbatch_does_not_suggest_resume(monkeypatch, tmp_path, capsys):
    def interrupted(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MaxBatchSearch, "run", interrupted)
    assert _maxbatch(tmp_path / "out") == 130
    err = capsys.readouterr().err
    assert "--resume" not in err.replace("has no --resume", ""), err  # before the fix: "... with --resume to finish"
    assert "maxbatch has no --resume" in err and "run the same command again" in err
    assert str(tmp_path / "out" / "results.sqlite") in err


def test_on_a_concurrent_executor_each_framework_searches_on_a_node_and_the_driver_writes(
        tmp_path, fake_executor, cache_dir):
    """Issue 23: with an executor that runs calls on nodes (RayExecutor.map_on_nodes), the max-batch searches are
    handed over together, one per framework; their probes and results come back and only the driver writes them,
    each probe naming the node its search ran on."""
    from harness.config.experiment import parse_experiment
    from harness.pipeline import run_experiment
    from harness.records import Placement
    from harness.store import Store
    from tests.fakes.memory_executor import LinearMemory

    fake_executor()
    handed: list[int] = []

    class OnNodes(LinearMemory):
        def map_on_nodes(self, fn, calls, gpu):  # type: ignore[no-untyped-def]
            handed.append(len(calls))
            return [(fn(*args), Placement(host=f"node{i}", node_id=f"id{i}", concurrent_n=1, attempt=1))
                    for i, args in enumerate(calls)]

    exp = parse_experiment({"name": "mbray", "frameworks": ["pytorch", "tensorflow"], "model": "tiny_cnn",
                            "batch_sizes": [8], "device": "cpu", "threads": 1, "warmup_steps": 1, "timed_steps": 2,
                            "synthetic_shape": [1, 8, 8], "synthetic_samples": 64, "max_batch": True,
                            "memory_limit_mib": 385}, source="inline")
    result = run_experiment(exp, tmp_path, SweepOptions(cache_dir=cache_dir, executor=OnNodes()))
    assert handed == [2]  # both searches at once
    assert sorted(r.framework for r in result.maxbatch) == ["pytorch", "tensorflow"]
    with Store.open(tmp_path, create=False) as store:
        rows = {r["framework"]: r for r in store.maxbatch_results()}
        probes = store.trials("purpose = 'probe'")
    assert rows["pytorch"]["max_batch"] == rows["tensorflow"]["max_batch"] == 28  # LinearMemory's law
    assert probes and {p["node_id"] for p in probes} == {"id0", "id1"}
    assert {p["host"] for p in probes if p["framework"] == "tensorflow"} == {"node1"}


def _mb_toml(path: Any, frameworks: list[str]) -> Any:
    path.write_text(f'name = "mbfail"\nframeworks = {json.dumps(frameworks)}\nmodel = "tiny_cnn"\nbatch_sizes = [4]\n'
                    'device = "cpu"\nthreads = 1\nwarmup_steps = 1\ntimed_steps = 2\nsynthetic_shape = [1, 8, 8]\n'
                    f'synthetic_samples = 64\neval_points = 0\nmax_batch = true\nmemory_limit_mib = {BUDGET_MIB:g}\n')
    return path


@pytest.mark.process
def test_a_sweeps_search_whose_probes_cannot_run_fails_the_run(fake_executor, tmp_path, capsys, monkeypatch,
                                                               cache_dir):
    """Issue 50, item 2: a search whose every probe fails for a reason other than memory (its workers cannot start)
    gave no answer; ``run`` says so and exits 1 (it exited 0), the sweep's trials still stored."""
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)
    fake_executor(failing_purpose="probe", failing_status="error")
    out = tmp_path / "out"
    code = main(["run", str(_mb_toml(tmp_path / "mb.toml", ["fake"])), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    assert "max batch fake: the search failed:" in captured.out
    assert "1 max-batch search(es) failed" in captured.err
    with Store.open(out, create=False) as store:
        assert [t["status"] for t in store.trials("purpose = 'sweep'")] == ["ok"]
        assert {t["status"] for t in store.trials("purpose = 'probe'")} == {"error"}


def test_a_search_task_that_raised_on_its_node_fails_the_run(tmp_path, fake_executor, cache_dir):
    """On Ray, a search's task that raised (or was lost with its node) is a failed search, not a note."""
    from harness.config.experiment import parse_experiment
    from harness.pipeline import run_experiment
    from tests.fakes.memory_executor import LinearMemory

    fake_executor()

    class Raising(LinearMemory):
        def map_on_nodes(self, fn, calls, gpu):  # type: ignore[no-untyped-def]
            return ["raised on its node: ModuleNotFoundError: No module named 'torch'" for _ in calls]

    exp = parse_experiment({"name": "mbraise", "frameworks": ["pytorch"], "model": "tiny_cnn", "batch_sizes": [8],
                            "device": "cpu", "threads": 1, "warmup_steps": 1, "timed_steps": 2,
                            "synthetic_shape": [1, 8, 8], "synthetic_samples": 64, "max_batch": True,
                            "memory_limit_mib": 385}, source="inline")
    result = run_experiment(exp, tmp_path, SweepOptions(cache_dir=cache_dir, executor=Raising()))
    assert result.maxbatch == [] and result.maxbatch_errors == [
        "pytorch: the search failed: raised on its node: ModuleNotFoundError: No module named 'torch'"]
