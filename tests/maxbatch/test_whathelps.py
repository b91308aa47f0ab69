"""What helps (issue 14, item 5): the plain search beside the same search with accumulation, a precision or an
adapter setting, one stored row per search, one table, and refusals before anything is written.

The searches run against the stand-in executor (tests/fakes/memory_executor.py: peak = 100 + 10·batch MiB, half
the activations at a precision other than fp32, accumulation at the micro-batch's peak), so every answer is
exact; the real-framework measurement of accumulation is the slow test at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.cli import maxbatch as maxbatch_cli
from harness.errors import ConfigError
from harness.maxbatch import probes as prober
from harness.maxbatch import whathelps
from harness.maxbatch.advice import CPU_PEAK_JITTER_MIB
from harness.registry import adapter_class
from harness.store import Store
from harness.store.maxbatch_row import maxbatch_record
from tests.fakes.memory_executor import BUDGET_MIB
from tests.helpers.envs import runtime_for


def _maxbatch(out: Path, *extra: str, framework: str = "pytorch", budget: float = BUDGET_MIB) -> int:
    return main(["maxbatch", "--framework", framework, "--model", "tiny_cnn", "--device", "cpu",
                 "--memory-limit-mib", f"{budget:g}", "--threads", "1", "--out", str(out), *extra])


def _rows(out: Path) -> list[dict[str, Any]]:
    with Store.open(out, create=False) as store:
        return store.maxbatch_results()


def _table(printed: str) -> dict[str, list[str]]:
    """The printed what-helps table, by setting: the cells split on runs of two spaces."""
    lines = printed.split("what helps (one search per row")[1].splitlines()[2:]
    rows = {}
    for line in lines:
        if not line.strip() or line.startswith("note:"):
            break
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        rows[cells[0]] = cells[1:]
    return rows


def test_the_plan_is_plain_each_setting_alone_then_all_together():
    labels = [s.label for s in whathelps.plan_settings("amp", 4, {"memory_mode": "preallocate"})]
    assert labels == ["plain", "accumulate_steps=4", "precision=amp", "memory_mode=preallocate",
                      "accumulate_steps=4 + precision=amp + memory_mode=preallocate"]
    assert [s.label for s in whathelps.plan_settings("fp32", 4, {})] == ["plain", "accumulate_steps=4"]
    assert [s.label for s in whathelps.plan_settings("fp32", 4, {}, include_plain=False)] == ["accumulate_steps=4"]
    assert not whathelps.asks_what_helps("fp32", 1, {}) and whathelps.asks_what_helps("fp32", 2, {})
    # an option at the adapter's default is no setting (a sweep stores the resolved options)
    assert whathelps.setting_label("fp32", 1, {"memory_mode": "growth"}, {"memory_mode": "growth"}) == "plain"
    assert whathelps.setting_label("fp32", 1, {"flag": True, "mib": 128}) == "flag=true + mib=128"


def test_adapter_options_are_toml_scalars_checked_by_the_adapter():
    assert maxbatch_cli.parse_adapter_option("memory_mode=preallocate") == ("memory_mode", "preallocate")
    assert maxbatch_cli.parse_adapter_option("expandable_segments=true") == ("expandable_segments", True)
    assert maxbatch_cli.parse_adapter_option("max_split_size_mb = 128") == ("max_split_size_mb", 128)
    assert maxbatch_cli.parse_adapter_option('name="128"') == ("name", "128")
    tf = adapter_class("tensorflow")
    assert maxbatch_cli.adapter_options(["memory_mode=preallocate"], tf) == {"memory_mode": "preallocate"}
    for pairs, message in ((["memory_mode"], "is not KEY=VALUE"), (["memory_mode=[1, 2]"], "one word"),
                           (["nosuch=1"], "has no setting 'nosuch'"), (["memory_mode=lots"], "is not one of"),
                           (["memory_mode=growth"], "default, which the plain search runs with already"),
                           (["memory_mode=preallocate", "memory_mode=growth"], "given twice")):
        with pytest.raises(ConfigError, match=message):
            maxbatch_cli.adapter_options(pairs, tf)


def test_a_memory_mode_that_does_nothing_where_the_search_runs_is_refused():
    for name in ("tensorflow", "jax"):
        cls = adapter_class(name)
        with pytest.raises(ConfigError, match="GPU memory only"):
            whathelps.check_options_apply(cls, {"memory_mode": "preallocate"}, "cpu", 0.0)
        with pytest.raises(ConfigError, match="replaces"):  # an emulated smaller card: its cap replaces the mode
            whathelps.check_options_apply(cls, {"memory_mode": "preallocate"}, "gpu", 6144.0)
        whathelps.check_options_apply(cls, {"memory_mode": "preallocate"}, "gpu", 0.0)  # the whole card: applies
    assert adapter_class("pytorch").options_without_effect({}, "cpu") == {}


def test_the_precision_check_passes_the_device_once_the_adapter_takes_it():
    seen: list[tuple[str, str | None]] = []

    class Today:
        @classmethod
        def validate_precision(cls, precision: str) -> str:
            seen.append((precision, None))
            return precision

    class WithDevice:
        @classmethod
        def validate_precision(cls, precision: str, device: str = "cpu") -> str:
            seen.append((precision, device))
            if device == "cpu" and precision != "fp32":
                raise ConfigError(f"{precision!r} runs on a GPU only")
            return precision

    whathelps.check_precision(Today, "amp", "cpu")
    whathelps.check_precision(WithDevice, "amp", "gpu")
    with pytest.raises(ConfigError, match="GPU only"):
        whathelps.check_precision(WithDevice, "amp", "cpu")
    assert seen == [("amp", None), ("amp", "gpu"), ("amp", "cpu")]


def test_one_row_per_search_told_apart_and_one_table(fake_executor, tmp_path, capsys):
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", "--accumulate-steps", "4", "--precision", "bf16") == 0, \
        capsys.readouterr().err
    printed = capsys.readouterr().out
    rows = _rows(tmp_path / "out")
    # plain, each alone, both: four normal searches in one run, each its own row
    assert [r["setting"] for r in rows] == ["plain", "accumulate_steps=4", "precision=bf16",
                                            "accumulate_steps=4 + precision=bf16"]
    assert len({r["run_id"] for r in rows}) == 1
    assert [(r["max_batch"], r["accumulate_steps"], r["effective_batch"], r["precision"]) for r in rows] == [
        (28, 1, 28, "fp32"), (28, 4, 112, "fp32"), (57, 1, 57, "bf16"), (57, 4, 228, "bf16")]
    assert all(r["effective_batch"] == r["max_batch"] * r["accumulate_steps"] for r in rows)
    assert [r["answer_peak_mib"] for r in rows] == [380.0, 380.0, 385.0, 385.0]
    assert [r["answer_samples_per_s"] for r in rows] == [1000.0, 900.0, 1000.0, 900.0]
    # every probe of a search ran its setting: k micro-batches per update, the precision
    units = made[0].units + made[1].units + made[2].units + made[3].units
    assert {(u.trial.accumulate_steps, u.trial.precision) for u in made[1].units} == {(4, "fp32")}
    assert {(u.trial.accumulate_steps, u.trial.precision) for u in made[0].units} == {(1, "fp32")}
    assert {u.trial.effective_batch_size for u in made[1].units} == {4 * u.trial.batch_size for u in made[1].units}
    # four times the training per probe: four times the time (--timeout-s is per micro-batch of each update)
    assert {u.trial.timeout_s for u in made[1].units if u.trial.purpose == "probe"} == {1200.0}
    assert {u.trial.timeout_s for u in made[0].units if u.trial.purpose == "probe"} == {300.0}
    with Store.open(tmp_path / "out", create=False) as store:
        assert len(store.trials("purpose = 'probe'")) == len({u.trial.trial_hash for u in units
                                                              if u.trial.purpose == "probe"})
        # each search's recommendation settled by fresh runs under glibc's default malloc (issue 22)
        assert len(store.trials("purpose = 'settle'")) == prober.HEAP_SETTLE_RUNS * len(rows)
    # the plain answer in full, then the table: one row per search, effective = micro x k
    assert "plain search:\nlargest batch that fits (train + eval step): 28" in printed
    table = _table(printed)
    assert list(table) == [r["setting"] for r in rows]
    for r in rows:
        micro, k, effective = table[r["setting"]][:3]
        assert (int(micro), int(k), int(effective)) == (r["max_batch"], r["accumulate_steps"], r["effective_batch"])
    assert table["plain"][-1] == "(reference)"
    assert table["accumulate_steps=4"][-1] == "micro-batch ±0%, effective batch x4.00, samples/s -10%, peak ±0%"
    assert table["accumulate_steps=4 + precision=bf16"][-1].startswith("micro-batch +104%, effective batch x8.14")
    assert table["precision=bf16"][-1].startswith("effective batch x2.04")  # k = 1: the micro-batch is the effective
    assert table["precision=bf16"][3:5] == ["385", "1000"]


def test_an_adapter_option_is_a_search_of_its_own(fake_executor, tmp_path, capsys, monkeypatch):
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", "--adapter-option", "behaviour=noisy", framework="fake") == 0, \
        capsys.readouterr().err
    rows = _rows(tmp_path / "out")
    assert [(r["setting"], json.loads(r["adapter_options_json"])) for r in rows] == [
        ("plain", {}), ("behaviour=noisy", {"behaviour": "noisy"})]
    assert {tuple(u.trial.adapter_options.items()) for u in made[1].units} == {(("behaviour", "noisy"),)}
    assert {tuple(u.trial.adapter_options.items()) for u in made[0].units} == {()}


def test_a_command_looks_its_framework_up_once_however_many_searches_it_runs(fake_executor, tmp_path, capsys,
                                                                           monkeypatch):
    """Issue 51: one ``maxbatch`` reads the registry once for its framework: the command line's adapter options, the
    request's checks, the runtime's resolution, every setting's search and every stored answer use what that one
    lookup found (it was looked up again by each of them: three times for a plain search, once more per setting)."""
    from tests.fakes.registry import register_fake
    from tests.helpers.registry import count_lookups

    register_fake(monkeypatch)
    fake_executor()
    asked = count_lookups(monkeypatch)
    assert _maxbatch(tmp_path / "out", "--adapter-option", "behaviour=noisy", framework="fake") == 0, \
        capsys.readouterr().err
    assert [r["setting"] for r in _rows(tmp_path / "out")] == ["plain", "behaviour=noisy"]
    # the built-ins are read once each too: a plugin without requirements of its own runs in the environment of the
    # built-in whose framework it imports, found by their import names (harness.envs.resolve.shared_builtin)
    assert asked[0] == "fake" and len(asked) == len(set(asked)), asked


def test_a_fixed_mmap_threshold_is_a_setting_with_its_measured_cost(fake_executor, tmp_path, capsys, monkeypatch):
    # issue 22: what every CPU worker had until then is a setting to try, beside the plain search (glibc's defaults)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", "--env", "MALLOC_MMAP_THRESHOLD_=131072") == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    plain, fixed = _rows(tmp_path / "out")
    assert (plain["setting"], fixed["setting"]) == ("plain", "MALLOC_MMAP_THRESHOLD_=131072")
    assert json.loads(plain["train_env_json"]) == {}
    assert json.loads(fixed["train_env_json"]) == {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert all("MALLOC_MMAP_THRESHOLD_" not in u.env for u in made[0].units)
    assert {u.env.get("MALLOC_MMAP_THRESHOLD_") for u in made[1].units} == {"131072"}
    # the same boundary in the stand-in (its memory law ignores the allocator); the plain one keeps the heap allowance
    assert plain["max_batch"] == fixed["max_batch"] == 28
    assert plain["margin_heap_mib"] > 0 and fixed["margin_heap_mib"] == 0.0
    assert fixed["recommended_batch"] > plain["recommended_batch"]
    assert "cost: MALLOC_MMAP_THRESHOLD_" in printed and "0.57x" in printed
    assert list(_table(printed)) == ["plain", "MALLOC_MMAP_THRESHOLD_=131072"]


@pytest.mark.parametrize("text,message", [
    ("NOT_AN_ALLOCATOR=1", "not an allocator setting batchscope knows"),
    ("MALLOC_MMAP_THRESHOLD_", "is not KEY=VALUE"),
])
def test_an_env_setting_that_is_not_an_allocator_variable_is_refused(text, message, fake_executor, tmp_path,
                                                                     capsys):
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", "--env", text) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not made


def test_a_setting_that_makes_the_model_fit_is_an_answer_when_plain_does_not(fake_executor, tmp_path,
                                                                               capsys):
    fake_executor()
    # 107 MiB: fp32 needs 110 at batch 1, bf16 105
    assert _maxbatch(tmp_path / "out", "--precision", "bf16", budget=107.0) == 0
    captured = capsys.readouterr()
    rows = _rows(tmp_path / "out")
    assert [(r["setting"], r["max_batch"]) for r in rows] == [("plain", 0), ("precision=bf16", 1)]
    table = _table(captured.out)
    assert table["plain"][0] == "0 (not even 1)" and table["precision=bf16"][-1].startswith("fits where plain")
    assert "plain: tiny_cnn does not fit" in captured.err


def test_nothing_fits_under_any_setting_exits_3(fake_executor, tmp_path, capsys):
    fake_executor()
    assert _maxbatch(tmp_path / "out", "--accumulate-steps", "2", budget=105.0) == 3
    assert [r["max_batch"] for r in _rows(tmp_path / "out")] == [0, 0]


def test_an_aborted_search_does_not_stop_the_others_and_exits_1(fake_executor, tmp_path, capsys):
    made = fake_executor(killed_calls=tuple(range(1, 20)))  # every worker of each search is killed: no boundary
    assert _maxbatch(tmp_path / "out", "--accumulate-steps", "2") == 1
    captured = capsys.readouterr()
    assert len(made) == 2 and all(m.units for m in made)  # the second search ran after the first aborted
    table = _table(captured.out)
    assert list(table) == ["plain", "accumulate_steps=2"] and all(r[0].startswith("aborted:") for r in table.values())
    assert "Traceback" not in captured.err and _rows(tmp_path / "out") == []


def test_no_plain_runs_only_the_settings(fake_executor, tmp_path, capsys):
    fake_executor()
    assert _maxbatch(tmp_path / "out", "--accumulate-steps", "4", "--no-plain") == 0
    out = capsys.readouterr().out
    assert [r["setting"] for r in _rows(tmp_path / "out")] == ["accumulate_steps=4"]
    assert "accumulate_steps=4:\nlargest batch that fits" in out


@pytest.mark.parametrize("extra,framework,message", [
    (("--accumulate-steps", "4"), "fake", "does not implement gradient accumulation"),
    (("--accumulate-steps", "0"), "pytorch", "must be in 1..1024"),
    (("--adapter-option", "nosuch=1"), "pytorch",
     "has no setting 'nosuch'; valid settings: native_model, expandable_segments"),
    (("--adapter-option", "memory_mode=preallocate"), "tensorflow", "changes nothing here"),
    (("--adapter-option", "memory_mode=growth"), "tensorflow", "the plain search runs with already"),
    (("--adapter-option", "bad"), "pytorch", "is not KEY=VALUE"),
    (("--precision", "amp", "--accumulate-steps", "4"), "pytorch", "is not run by the pytorch adapter on the CPU"),
    (("--no-plain",), "pytorch", "--no-plain applies only with a setting to try"),
])
def test_refusals_exit_2_and_write_nothing(extra, framework, message, fake_executor, tmp_path, capsys, monkeypatch):
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)  # the fake adapter implements no accumulation, like a plugin that predates it
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", *extra, framework=framework) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() and not made  # no store, no directory, no worker


def test_the_report_tells_the_searches_apart_and_takes_the_plain_one_as_what_fits():
    from report.answer.recommend import _max_fit
    from report.document.tables import maxbatch

    plain = {"framework": "pytorch", "model": "m", "max_batch": 28, "recommended_batch": 27, "setting": "plain",
             "accumulate_steps": 1, "effective_batch": 28, "budget_mib": 385.0, "budget_kind": "cpu-rlimit-data"}
    accumulated = plain | {"setting": "accumulate_steps=4", "accumulate_steps": 4, "effective_batch": 112,
                           "max_batch": 27}
    old = {k: v for k, v in plain.items() if k not in ("setting", "accumulate_steps", "effective_batch")}
    plain, accumulated, old = (maxbatch_record(r) for r in (plain, accumulated, old))
    fit = _max_fit([plain, accumulated], "pytorch")
    assert fit is not None and fit.max_batch == 28  # not the later accumulated search's micro-batch
    fit = _max_fit([old], "pytorch")  # a row from before the setting column
    assert fit is not None and fit.max_batch == 28
    table = maxbatch([plain, accumulated])
    assert table is not None
    assert [r[0] for r in table.rows] == ["pytorch", "pytorch · accumulate_steps=4"]
    assert [r[3] for r in table.rows] == ["28", "27 (×4 = 112)"]
    assert "setting" in table.csv_headers and "effective_batch" in table.csv_headers


def test_the_reports_max_batch_table_says_when_the_cap_stopped_the_search():
    from report.document.tables import maxbatch

    row = {"framework": "pytorch", "model": "m", "max_batch": 4, "recommended_batch": 4, "budget_mib": 8000.0,
           "budget_kind": "cpu-rlimit-data"}
    capped, found = maxbatch_record(row | {"capped": 1}), maxbatch_record(row)
    table = maxbatch([capped, found])
    assert table is not None and table.headers[5] == "first failing"
    assert [r[5] for r in table.rows] == ["none up to the cap", "-"]


# ---------------------------------------------------------------- real workers, real limits
@pytest.mark.slow
@pytest.mark.alone  # two workers' peaks compared to within a fresh process's jitter
def test_accumulation_keeps_the_peak_at_the_micro_batch_on_a_real_pytorch_worker(tmp_path):
    """The issue's "peak memory stays at the micro-batch's level (measure it)": the same micro-batch in fresh
    PyTorch workers under the same OS limit, updates of 1 and of 4 micro-batches: the peaks agree within a fresh
    worker's run-to-run jitter plus one copy of the gradients (which accumulation keeps between micro-batches:
    ~18 MiB for deep_cnn, measured in docs/maxbatch.md; 906 parameters here), while each update trains 4 times
    the samples (which, as one batch, would need about 3 x 64 x 0.5 MiB more)."""
    from harness.data import DataRequest, prepare
    from harness.maxbatch.budget import resolve_budget
    from harness.maxbatch.probes import WorkerProber, probe_peak_mib
    from harness.maxbatch.request import MaxBatchRequest
    from harness.run.executor import LocalExecutor

    shape, micro = (3, 64, 64), 64
    data = prepare(DataRequest(name="synthetic", synthetic_shape=shape, synthetic_classes=10, synthetic_samples=512),
                   tmp_path / "cache")
    peaks, outcomes = {}, {}
    for k in (1, 4):
        req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="cpu", memory_limit_mib=480.0,
                              threads=1, momentum=0.9, synthetic_shape=shape, synthetic_samples=512,
                              timeout_s=240.0, experiment="mb-acc", accumulate_steps=k,
                              # a fixed glibc threshold, so the peaks repeat to the MiB and compare the two laws,
                              # not glibc's heap (which moves 20-45 MiB between fresh workers: docs/maxbatch.md)
                              env={"MALLOC_MMAP_THRESHOLD_": "131072"})
        budget = resolve_budget(req, [])
        prober = WorkerProber(req, budget, data, LocalExecutor(log_dir=tmp_path / f"k{k}"),
                              runtime=runtime_for("pytorch"))
        # plain: the confirm run (1 + 8 steps), accumulated: a probe (1 + 2 updates of 4): as many passes or more
        result = prober(micro, k == 1)
        assert result.status == "ok", result.reason
        outcomes[k] = prober.outcomes[-1]
        peaks[k] = probe_peak_mib(outcomes[k], budget.kind)
    metrics = outcomes[4].metrics
    assert metrics is not None and metrics.micro_batches_n is not None and metrics.optimizer_updates_n
    assert metrics.micro_batches_n == 4 * metrics.optimizer_updates_n  # k forward/backward passes per update
    assert outcomes[4].trial.effective_batch_size == 4 * micro
    assert peaks[1] is not None and peaks[4] is not None
    gradients_mib = (outcomes[4].param_count or 0) * 4 / 2**20
    assert abs(peaks[4] - peaks[1]) <= CPU_PEAK_JITTER_MIB + gradients_mib, peaks
