"""Max batch: budgets, the formula, the stored row, the command's refusals, and the real boundary on CPU.

The integration tests run real PyTorch workers under an OS-enforced limit (RLIMIT_DATA): tiny_cnn on
3x64x64 noise has large activations for little compute, so the boundary lies at a few hundred samples
and each probe costs a worker start-up plus a few cheap steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from harness.cli import main
from harness.data import DataRequest, prepare
from harness.errors import ConfigError
from harness.maxbatch.advice import (
    CPU_PEAK_JITTER_MIB,
    Formula,
    answer_headroom_mib,
    jitter_advice,
    pow2_at_or_below,
    recommend,
)
from harness.maxbatch.budget import resolve_budget
from harness.maxbatch.probes import WorkerProber, control_limit_mib, probe_peak_mib
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import CPU_RESOLUTION, Resolution, SearchLine
from harness.records import (
    MaxBatchResult,
    MemoryLine,
    MonitorResult,
    ProbeLog,
    ProbeResult,
    SearchAnswer,
    StoredFormula,
    StoredMargin,
    TrialOutcome,
    WorkerMetrics,
)
from harness.run.executor import LocalExecutor
from harness.store import MAXBATCH_COLUMN_NAMES, Store
from harness.store.maxbatch_row import maxbatch_record
from tests.conftest import make_trial
from tests.helpers.envs import runtime_for
from tests.helpers.shared import RUNS
from tests.maxbatch.conftest import FIXED_THRESHOLD, fixed_threshold
from tests.tiers import SEARCH_CODE

GPU = [{"index": 0, "name": "Fake H100", "memory_total_mib": 81559.0}]
AGREED_COLUMNS = (
    "result_id run_id experiment framework model dataset device precision strategy budget_mib budget_kind "
    "margin_mib max_batch first_fail_batch first_fail_status first_fail_reason recommended_batch recommended_pow2 "
    "recommended_mult8 probes_n wall_s formula_batch formula_error_pct param_count per_sample_activation_mib "
    "fit_a_mib fit_b_mib_per_sample probes_json env_json finished_at").split()
SHAPE = (3, 64, 64)
LIMIT_MIB = 480.0


def jitter_samples(fit: SearchLine | None) -> int:
    """CPU_PEAK_JITTER_MIB in samples, by the measured per-sample slope: how far boundaries found by separate
    fresh-process runs may differ, in either direction, and no more (docs/maxbatch.md)."""
    assert fit is not None and fit.b_mib_per_sample > 0, fit
    return math.ceil(CPU_PEAK_JITTER_MIB / fit.b_mib_per_sample)


def test_store_has_exactly_the_agreed_columns_first(tmp_path):
    assert list(MAXBATCH_COLUMN_NAMES[: len(AGREED_COLUMNS)]) == AGREED_COLUMNS
    with Store.open(tmp_path) as store:
        have = [r[1] for r in store.conn.execute("PRAGMA table_info(maxbatch)")]
    assert have == list(MAXBATCH_COLUMN_NAMES)


def test_budgets_cpu_card_emulated_and_refusals():
    cpu = resolve_budget(MaxBatchRequest("pytorch", "deep_cnn", memory_limit_mib=900), [])
    assert (cpu.kind, cpu.device, cpu.os_limit_mib, cpu.trial_limit_mib) == ("cpu-rlimit-data", "cpu", 900, 0)
    card = resolve_budget(MaxBatchRequest("pytorch", "deep_cnn"), GPU)
    assert (card.kind, card.mib, card.os_limit_mib) == ("gpu-card", 81559.0, None)
    emu = resolve_budget(MaxBatchRequest("tensorflow", "deep_cnn", memory_limit_mib=6144), GPU)
    assert (emu.kind, emu.mib, emu.trial_limit_mib) == ("gpu-emulated", 6144, 6144)
    forced_cpu = resolve_budget(MaxBatchRequest("pytorch", "deep_cnn", device="cpu", memory_limit_mib=900), GPU)
    assert forced_cpu.kind == "cpu-rlimit-data"
    with pytest.raises(ConfigError, match="RLIMIT_DATA"):
        resolve_budget(MaxBatchRequest("pytorch", "deep_cnn"), [])
    with pytest.raises(ConfigError, match="MXNet 1.9 has no per-process GPU memory cap"):
        resolve_budget(MaxBatchRequest("mxnet", "deep_cnn", memory_limit_mib=6144), GPU)
    with pytest.raises(ConfigError, match="more than the card has"):
        resolve_budget(MaxBatchRequest("pytorch", "deep_cnn", memory_limit_mib=1e6), GPU)
    with pytest.raises(ConfigError, match="NVML sees no GPU"):
        resolve_budget(MaxBatchRequest("pytorch", "deep_cnn", device="gpu"), [])
    with pytest.raises(ConfigError, match="margin"):
        MaxBatchRequest("pytorch", "deep_cnn", memory_limit_mib=100, margin_mib=100)


def test_a_cpu_only_build_beside_a_gpu_searches_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """device = "auto" resolved per framework (issue 29): tensorflow-cpu on a GPU machine is searched on the CPU
    (an OS budget), never told "gpu" (where its adapter would fail, or a card's budget would describe nothing)."""
    from harness.run import devices

    monkeypatch.setattr(devices, "build_of", lambda framework: (False, "CPU only (tensorflow-cpu 2.21.0)"))
    budget = resolve_budget(MaxBatchRequest("tensorflow", "deep_cnn", memory_limit_mib=900), GPU)
    assert (budget.device, budget.kind) == ("cpu", "cpu-rlimit-data")
    with pytest.raises(ConfigError, match="RLIMIT_DATA"):
        resolve_budget(MaxBatchRequest("tensorflow", "deep_cnn"), GPU)


def test_formula_and_recommendation():
    # 1M parameters, SGD with momentum: weights + grads + momentum = 3 x 4 MB
    f = Formula.compute(1_000_000, "sgd", 0.9, budget_mib=1000.0, per_sample_mib=2.0)
    assert f.model_state_mib == pytest.approx(12e6 / 2**20)
    assert f.batch == 256  # (1000 - 11.4) / 2 = 494 -> 256
    assert f.error_pct(300) == pytest.approx((256 - 300) / 300 * 100)
    assert Formula.compute(1_000_000, "adam", 0.0, 1000.0, 2.0).model_state_mib == pytest.approx(16e6 / 2**20)
    assert Formula.compute(300_000_000, "sgd", 0.0, 1000.0, 2.0).batch == 0  # the model alone is too big
    assert [pow2_at_or_below(n) for n in (0, 1, 2, 3, 255, 256)] == [0, 1, 2, 2, 128, 256]
    assert recommend(301, 0.0, SearchLine(100.0, 2.0), 9.0) == (301, 256, 296)
    assert recommend(301, 21.0, SearchLine(100.0, 2.0), 9.0) == (290, 256, 288)  # 21 MiB = 11 samples
    assert recommend(5, 0.0, None, 9.0) == (5, 4, None)


def _row(kind: str = "cpu-rlimit-data", margin: float = 0.0, peaks: tuple[float, ...] = (479.5,)) -> MaxBatchResult:
    probes = [ProbeResult(300, "ok", peak_mib=430.0), ProbeResult(401, "oom")]
    probes += [ProbeResult(400, "ok", peak_mib=p) for p in peaks]
    return MaxBatchResult(budget_kind=kind, budget_mib=480.0, margin=StoredMargin(user_mib=margin),
                          answer=SearchAnswer(max_batch=400), line=MemoryLine(a_mib=280.0, b_mib_per_sample=0.5),
                          formula=StoredFormula(analytic_mib_per_sample=1.0), probes=ProbeLog(items=tuple(probes)))


def test_headroom_and_the_jitter_warning():
    # the largest peak measured at the answer counts (the confirm run needed more than the short probe)
    assert answer_headroom_mib(_row(peaks=(478.0, 479.5))) == pytest.approx(0.5)
    assert answer_headroom_mib(_row(peaks=())) is None
    assert answer_headroom_mib(maxbatch_record({"probes_json": "not json"})) is None
    advice = jitter_advice(_row())
    # 3 MiB at 0.5 MiB per sample: 6 samples below the answer, and the option that gives it
    assert advice is not None and "0.5 MiB" in advice
    assert "394 leaves a margin of 3 MiB" in advice and "--margin-mib 3" in advice
    assert CPU_PEAK_JITTER_MIB == 3.0
    assert jitter_advice(_row(peaks=(470.0,))) is None  # 10 MiB to spare: more than a run moves
    assert jitter_advice(_row(margin=3.0)) is None  # the user's margin already covers it
    assert jitter_advice(_row(kind="gpu-card")) is None  # not measured on a GPU: no claim
    assert jitter_advice(_row(peaks=())) is None


def test_probe_peak_in_the_units_of_the_budget():
    o = TrialOutcome(trial=make_trial(), status="ok",
                     metrics=WorkerMetrics(maxrss_mib=900.0, vmdata_ready_mib=500.0, rss_ready_mib=600.0))
    assert probe_peak_mib(o, "cpu-rlimit-data") == 800.0  # VmData at start + growth of RSS
    o.metrics = WorkerMetrics(maxrss_mib=900.0, vmdata_ready_mib=500.0, rss_ready_mib=600.0,
                              vmdata_peak_mib=890.0)
    assert probe_peak_mib(o, "cpu-rlimit-data") == 890.0  # mappings seen only while the step ran
    # the sampled figure wins over the estimate: the RSS high-water mark
    o.metrics = dataclasses.replace(o.metrics, vmdata_peak_mib=700.0)
    assert probe_peak_mib(o, "cpu-rlimit-data") == 700.0  # may come from the start-up, before training
    o.metrics = WorkerMetrics(maxrss_mib=900.0)
    assert probe_peak_mib(o, "cpu-rlimit-data") == 900.0
    o.metrics = WorkerMetrics(framework_peak_mib=300.0, framework_reserved_mib=320.0)
    assert probe_peak_mib(o, "gpu-emulated") == 320.0
    o.metrics, o.monitor = None, MonitorResult(aggregates={"proc_gpu_mem_peak_mib": 1000.0})
    assert probe_peak_mib(o, "gpu-card") == 1000.0


class _StartsAbove:
    """A stand-in executor: the worker dies with SIGSEGV in setup below ``needs_mib``, as torch's import did."""

    def __init__(self, needs_mib: float) -> None:
        self.needs_mib, self.limits = needs_mib, []

    def run(self, unit):
        self.limits.append(unit.os_memory_limit_mib)
        if unit.os_memory_limit_mib < self.needs_mib:
            return TrialOutcome(trial=unit.trial, status="crashed", reason="killed by SIGSEGV in phase setup")
        return TrialOutcome(trial=unit.trial, status="ok", metrics=WorkerMetrics(maxrss_mib=300.0))


def test_a_crash_under_a_small_budget_is_the_budgets_only_if_a_control_run_passes(wide_data):
    req = _request(memory_limit_mib=120.0)
    budget = resolve_budget(req, [])
    # torch needs ~300 MiB to start: twice 120 would crash again; the control's 1 GiB floor does not
    starts = _StartsAbove(needs_mib=300.0)
    result = WorkerProber(req, budget, wide_data, starts)(1, False)
    # the same budget once more first (a one-off crash is not the budget's), then the control run
    assert starts.limits == [120.0, 120.0, control_limit_mib(120.0)] and control_limit_mib(120.0) >= 120.0 + 1024
    assert result.status == "oom" and "memory limit caused it" in result.reason
    # a worker that crashes under any limit is a real crash, never the boundary
    never = _StartsAbove(needs_mib=float("inf"))
    result = WorkerProber(req, budget, wide_data, never)(1, False)
    assert result.status == "crashed" and len(never.limits) == 3
    assert control_limit_mib(4000.0) == 8000.0  # large budgets: twice the budget


@pytest.mark.parametrize("argv,message", [
    (["--framework", "pytorch", "--model", "deep_cnn", "--device", "cpu"], "give --memory-limit-mib"),
    (["--framework", "nosuch", "--model", "deep_cnn", "--memory-limit-mib", "900"], "not a registered adapter"),
    (["--framework", "pytorch", "--model", "resnet", "--memory-limit-mib", "900"], "not in the catalogue"),
    (["--framework", "pytorch", "--model", "deep_cnn", "--memory-limit-mib", "-5"], "must be >= 0"),
    (["--framework", "pytorch", "--model", "deep_cnn", "--memory-limit-mib", "900", "--margin-mib", "950"],
     "leaves nothing"),
])
def test_bad_options_exit_2_and_write_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["maxbatch", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_unknown_strategy_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["maxbatch", "--framework", "pytorch", "--model", "deep_cnn", "--strategy", "galloping"])
    assert info.value.code == 2


# ---------------------------------------------------------------- real workers, real limits
@pytest.fixture(scope="module")
def wide_data(cache_dir: Path):
    return prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_classes=10,
                               synthetic_samples=512), cache_dir)


def _request(**kw: object) -> MaxBatchRequest:
    base: dict[str, object] = dict(framework="pytorch", model="tiny_cnn", device="cpu", memory_limit_mib=LIMIT_MIB,
                                   threads=1, momentum=0.9, synthetic_shape=SHAPE, synthetic_samples=512,
                                   timeout_s=240.0, experiment="mb-test",
                                   # the search's exactness is defined for a memory law that is monotone and repeats
                                   # from one fresh process to the next: glibc's fixed mmap threshold gives one (to
                                   # CPU_PEAK_JITTER_MIB); under its default the law moves by tens of MiB
                                   # (docs/maxbatch.md, issue 22), which the settling runs are tested for instead
                                   env={"MALLOC_MMAP_THRESHOLD_": "131072"})
    base.update(kw)
    return MaxBatchRequest(**base)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.heavy(*SEARCH_CODE)  # the exhaustive (1 %) search
@pytest.mark.alone  # peaks under an OS memory limit, checked to within a fresh process's jitter
def test_real_boundary_on_cpu_holds_in_fresh_workers_either_side_of_it(real_search, cache_dir, tmp_path):
    # the search is the shared real one (tests/maxbatch/conftest.py: `batchscope maxbatch`, 400 MiB); the check
    # at the end runs the same request the command built, in fresh workers of its own
    rows = [real_search.row]
    with Store.open(real_search.out, create=False) as store:
        probes = store.trials("purpose = 'probe'")
    best = rows[0]["max_batch"]
    assert 16 < best < 2000, best
    assert rows[0]["budget_kind"] == "cpu-rlimit-data"
    # the search stops within its resolution (default 1 %: issue 31): the first failure lies at most that far above
    res = Resolution.parse(rows[0]["resolution"])
    fail = rows[0]["first_fail_batch"]
    # or, where fresh processes' peaks moved by more (issue 43), within that spread, and the row says so
    spread = rows[0]["resolution_note"] or ""
    within = fail <= best + res.allowed(best) or "process-to-process spread" in spread
    assert best < fail and within and rows[0]["first_fail_status"] == "oom", (best, fail, res, spread)
    # a real allocation failure under the OS limit, classified oom: never a comparison of numbers
    assert "can't allocate memory" in rows[0]["first_fail_reason"]
    searched = json.loads(rows[0]["probes_json"])
    assert {p["status"] for p in searched} <= {"ok", "oom"}
    # a stored trial that failed without saying "memory" (oneDNN: "could not create a primitive") was
    # re-run under a larger limit (control_limit_mib), passed there, and so counted as oom by the search
    for trial in probes:
        if trial["status"] not in ("ok", "oom"):
            # (or it was a one-off: the same probe at the same budget then passed or ran out of memory)
            assert any(p["batch"] == trial["batch_size"] and ("memory limit caused it" in p["reason"]
                                                                or "then at the same budget" in p["reason"])
                       for p in searched), trial["reason"]
    assert len(json.loads(rows[0]["probes_json"])) == rows[0]["probes_n"] <= len(probes)
    assert rows[0]["formula_batch"] > 0 and rows[0]["formula_error_pct"] is not None
    fit = SearchLine(a_mib=rows[0]["fit_a_mib"], b_mib_per_sample=rows[0]["fit_b_mib_per_sample"])
    # a probe that passed under the OS limit cannot have mapped more than the limit (the peak is VmData, what
    # RLIMIT_DATA counts); and since `fail` failed, less than (fail - best) samples plus the jitter was left unused
    spare = answer_headroom_mib(maxbatch_record(rows[0]))
    assert spare is not None and 0.0 <= spare < (fail - best) * fit.b_mib_per_sample + CPU_PEAK_JITTER_MIB, spare
    # fresh workers either side of the answer, the longer (confirm) run, under the request `batchscope maxbatch`
    # built from the same options (its defaults: 2048 samples, momentum 0.9)
    req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="cpu", memory_limit_mib=400.0, threads=1,
                          momentum=0.9, synthetic_shape=SHAPE)
    data = prepare(DataRequest(name="synthetic", synthetic_shape=SHAPE, synthetic_classes=req.synthetic_classes,
                               synthetic_samples=req.synthetic_samples), cache_dir)
    prober = WorkerProber(req, resolve_budget(req, []), data, LocalExecutor(log_dir=tmp_path / "scan"),
                          runtime=runtime_for("pytorch"))  # its managed environment, as the command's probes ran
    assert FIXED_THRESHOLD.items() <= json.loads(real_search.row["train_env_json"]).items()  # what its workers had
    # A fresh process's peak at one size moves by whole 1 MiB CPython arenas (docs/maxbatch.md; seen in CI: the
    # answer 384 passed the search's confirm run, then failed in a fresh worker). So the boundary is checked up to
    # that jitter, both ways: the size j below the answer fits, the size j above the search's first failure fails
    # with oom. The sizes between are not run: within the jitter a fresh worker may go either way, so all a run of
    # them could check is that each fits or runs out of memory, which the search's own probes were checked for
    # above (an exhaustive scan of the 2j + 2 sizes took ~170 s of the suite's 2 cores: issue 30)
    j = jitter_samples(fit)
    assert j < best / 20, (j, best)  # the tolerance stays small next to the answer
    with fixed_threshold():  # the allocator setting the search ran under (tests/maxbatch/conftest.py)
        below, above = prober(best - j, True), prober(fail + j, True)
    assert below.status == "ok", (j, below.status, below.reason)
    assert above.status == "oom", (j, above.status, above.reason)


@pytest.mark.slow
def test_budget_below_the_frameworks_overhead_exits_3(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
                 "--memory-limit-mib", "120", "--threads", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "fixed overhead" in err and "larger --memory-limit-mib" in err
    with Store.open(out, create=False) as store:
        row = store.maxbatch_results()[0]
    # 1 probe, or 2 when torch's import under the budget fails without naming memory (seen: "SystemError:
    # error return without exception set") and the search re-tries it once before calling it the boundary
    assert row["max_batch"] == 0 and row["first_fail_batch"] == 1 and row["probes_n"] in (1, 2)


@pytest.mark.slow
@pytest.mark.heavy(*SEARCH_CODE)  # two exhaustive searches
@pytest.mark.alone  # two runs' boundaries, compared to within a fresh process's peak jitter
def test_model_and_double_bisect_agree_on_the_real_boundary(real_search, tmp_path):
    # the model strategy's answer is the shared real search's (tests/maxbatch/conftest.py: the default strategy,
    # 400 MiB); double-bisect runs the same command with its own strategy
    from tests.maxbatch.conftest import REAL_SEARCH_ARGS

    model = real_search.row
    assert model["strategy"] == "model", model
    with fixed_threshold():  # as the shared search ran
        assert main([*REAL_SEARCH_ARGS, "--strategy", "double-bisect", "--out", str(tmp_path / "db")]) == 0
    with Store.open(tmp_path / "db", create=False) as store:
        (bisect,) = store.maxbatch_results()
    answers = {"model": (model["max_batch"], model["probes_n"]),
               "double-bisect": (bisect["max_batch"], bisect["probes_n"])}
    trail = [(p.get("stage"), p["batch"], p["status"], p.get("peak_mib")) for p in json.loads(model["probes_json"])]
    fit = SearchLine(a_mib=model["fit_a_mib"], b_mib_per_sample=model["fit_b_mib_per_sample"])
    # Each strategy stops within the resolution (1 % by default: issue 31) of what its own probes saw, and two runs
    # see boundaries that differ by the documented jitter of a fresh process's peak (seen in CI: 252 vs 251), so
    # they must agree up to the resolution plus CPU_PEAK_JITTER_MIB worth of samples, by the measured slope.
    j = jitter_samples(fit)
    res = Resolution.parse(model["resolution"])
    assert res == Resolution.parse(bisect["resolution"]) == CPU_RESOLUTION
    within = res.allowed(min(answers["model"][0], answers["double-bisect"][0])) - 1 + j
    assert abs(answers["model"][0] - answers["double-bisect"][0]) <= within, (answers, within, trail)
    assert j < answers["model"][0] / 20  # the tolerance stays small next to the answer
    # fewer probes than the baseline on a real worker; the "at most half" goal is the simulator's (test_maxbatch_sim),
    # on modelled noise: here a boundary that jitters by a few MiB can make the line undershoot and the search step
    # up a resolution at a time (seen in CI: 11 probes against 16; 7 against 17 on a quieter run)
    assert answers["model"][1] < answers["double-bisect"][1], (answers, trail)


@pytest.mark.slow
def test_sweep_with_max_batch_stores_the_search_per_framework(tmp_path, capsys):
    # The subject is that a sweep stores its search, not the search's exactness: it runs under the fixed mmap
    # threshold (tests/maxbatch/conftest.py), whose boundary repeats from one process to the next, so no probe is
    # repeated for a moving boundary and no settling runs are needed (under glibc's default this search took ~19
    # probes, 112 s alone). The settling runs' length from the experiment (max_batch_settle_steps) is checked with
    # the stand-in executor: test_answer_holds.py::test_a_sweeps_search_settles_for_the_experiments_settle_steps
    exp = tmp_path / "mb.toml"
    exp.write_text('name = "mbsweep"\nframeworks = ["pytorch"]\nmodel = "tiny_cnn"\nbatch_sizes = [8]\n'
                   'device = "cpu"\nthreads = 1\nwarmup_steps = 1\ntimed_steps = 2\nsynthetic_shape = [3, 64, 64]\n'
                   'synthetic_samples = 512\nmax_batch = true\nmemory_limit_mib = 360\n'
                   'max_batch_granularity = "10%"\n')  # the search's resolution, from the experiment (fewer probes)
    out = tmp_path / "out"
    with fixed_threshold():
        assert main(["run", str(exp), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    with Store.open(out, create=False) as store:
        rows = store.maxbatch_results("experiment = 'mbsweep'")
        sweep = store.trials("purpose = 'sweep'")
        probes = store.trials("purpose = 'probe'")
    assert len(rows) == 1 and rows[0]["framework"] == "pytorch" and rows[0]["max_batch"] > 8
    assert rows[0]["budget_kind"] == "cpu-rlimit-data"
    assert rows[0]["resolution"] == "10%", rows[0]["resolution"]
    best = rows[0]["max_batch"]
    gap = rows[0]["first_fail_batch"] - best
    # within the resolution, or (issue 43) within the process-to-process spread the search measured, said in the row
    spread = rows[0]["resolution_note"] or ""
    assert gap > 0 and (gap <= Resolution.parse("10%").allowed(best) or "process-to-process spread" in spread), \
        (best, gap, spread)
    assert [t["batch_size"] for t in sweep] == [8] and len(probes) == rows[0]["probes_n"]
    assert f"max batch pytorch: {rows[0]['max_batch']} fits" in printed
    # its workers had the fixed threshold, so the answer needed no settling runs
    assert FIXED_THRESHOLD.items() <= json.loads(rows[0]["train_env_json"]).items()
    assert rows[0]["heap_settle_json"] is None and rows[0]["margin_heap_mib"] == 0.0
    # --resume: the stored search is not run again
    with fixed_threshold():
        assert main(["run", str(exp), "--out", str(out), "--resume"]) == 0
    with Store.open(out, create=False) as store:
        assert len(store.maxbatch_results()) == 1


def test_sweep_with_max_batch_on_cpu_without_a_limit_is_refused_before_running(tmp_path, capsys):
    exp = tmp_path / "mb.toml"
    exp.write_text('name = "mbsweep"\nframeworks = ["pytorch"]\nbatch_sizes = [8]\ndevice = "cpu"\nmax_batch = true\n')
    assert main(["run", str(exp), "--out", str(tmp_path / "out")]) == 2
    assert "memory-limit-mib" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.slow
@pytest.mark.heavy(*SEARCH_CODE)  # reads the exhaustive search
def test_the_shared_real_search_ran_once_in_this_worker(real_search):
    """Last of its group: the two tests above read the one real search (tests/helpers/shared.py counts its runs)."""
    assert real_search.code == 0
    assert RUNS["real_search"] == 1, dict(RUNS)
