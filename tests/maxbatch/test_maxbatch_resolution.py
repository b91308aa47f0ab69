"""The search's resolution and progress as the command runs them (issue 31): ``--granularity``, the bracket printed
as it narrows, the resolution stored; and on a GPU what grows with the batch and the censored pool figure.

Against the stand-in executor (tests/fakes/memory_executor.py: peak = 100 + 10·batch MiB under the worker's limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.maxbatch.budget import Budget
from harness.maxbatch.probes import probe_growth_mib, probe_peak_mib, search_settings
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.search import CPU_RESOLUTION, GPU_CENSOR_PCT, GPU_RESOLUTION, Resolution
from harness.records import TrialOutcome, WorkerMetrics
from harness.store import Store
from tests.conftest import make_trial


def _maxbatch(out: Path, budget_mib: float, *extra: str) -> int:
    return main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu", "--quiet",
                 "--memory-limit-mib", f"{budget_mib:g}", "--threads", "1", "--out", str(out), *extra])


def _row(out: Path) -> dict[str, Any]:
    with Store.open(out, create=False) as store:
        (row,) = store.maxbatch_results()
    return row


def test_the_bracket_is_printed_as_it_narrows_and_the_resolution_stored(tmp_path, fake_executor, capsys):
    fake_executor()
    assert _maxbatch(tmp_path / "out", 385.0) == 0  # 28 fits (380 MiB), 29 does not
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].startswith("environment pytorch: managed pytorch-cpu@")  # where the probes run, said first
    assert "resolution 1%" in lines[1]
    assert "search: fit 16 fits -> fits up to 16, no failure yet" in printed  # model's first: the estimate's anchor
    assert "-> between 28 (fits) and 29 (fails): 0 size(s) unknown" in printed
    assert "search: confirm 28 fits" in printed
    row = _row(tmp_path / "out")
    assert (row["max_batch"], row["first_fail_batch"], row["resolution"]) == (28, 29, "1%")
    assert f"probes: {row['probes_n']} fresh workers" in printed and "(model, resolution 1%)" in printed
    assert "wall time:" in printed


@pytest.mark.parametrize("granularity,label,widest", [("", "1%", 3), ("exact", "exact", 1), ("4", "4", 4),
                                                      ("4,2%", "4,2%", 5)])
def test_granularity_sets_where_the_search_stops(tmp_path, fake_executor, capsys, granularity, label, widest):
    fake_executor()
    extra = ("--granularity", granularity) if granularity else ()
    assert _maxbatch(tmp_path / "out", 2100.0, *extra) == 0  # 200 fits (2100 MiB), 201 does not
    row = _row(tmp_path / "out")
    res = Resolution.parse(row["resolution"])
    assert row["resolution"] == label and res.allowed(row["max_batch"]) <= widest
    printed = capsys.readouterr().out
    if row["first_fail_batch"] > row["max_batch"] + 1:  # the sizes between were not tried, and it says so
        first, last = row["max_batch"] + 1, row["first_fail_batch"] - 1
        assert (f"{first}-{last} not tried" if last > first else f"  {first} not tried") in printed
    else:
        assert f"first size that fails: {row['first_fail_batch']}" in printed
    assert row["max_batch"] <= 200 < row["first_fail_batch"] <= row["max_batch"] + res.allowed(row["max_batch"])
    assert row["max_batch"] % res.step == 0


def test_a_granularity_that_means_nothing_is_refused_before_anything_runs(tmp_path, fake_executor, capsys):
    made = fake_executor()
    assert _maxbatch(tmp_path / "out", 385.0, "--granularity", "fine") == 2
    assert "--granularity 'fine'" in capsys.readouterr().err
    assert not made and not (tmp_path / "out").exists()


def _outcome(**metrics: float) -> TrialOutcome:
    return TrialOutcome(trial=make_trial(), status="ok", metrics=WorkerMetrics(**metrics))  # type: ignore[arg-type]


def test_on_a_gpu_the_allocated_peak_is_what_grows_and_the_reserved_one_what_the_budget_counts():
    outcome = _outcome(framework_reserved_mib=6100.0, framework_peak_mib=5200.0, vmdata_peak_mib=900.0)
    assert probe_peak_mib(outcome, "gpu-emulated") == 6100.0
    assert probe_growth_mib(outcome, "gpu-emulated") == 5200.0
    assert probe_growth_mib(outcome, "cpu-rlimit-data") is None  # on CPU the peak is what the limit counts
    assert probe_growth_mib(_outcome(framework_reserved_mib=6100.0), "gpu-card") is None
    # a peak with no reserved figure beside it is that peak (TensorFlow's allocated one, MXNet's device-level used)
    assert probe_growth_mib(_outcome(framework_peak_mib=5200.0), "gpu-card") is None
    assert probe_peak_mib(_outcome(framework_peak_mib=5200.0), "gpu-card") == 5200.0


def test_search_settings_per_device():
    gpu = search_settings(MaxBatchRequest(framework="pytorch", model="tiny_cnn"),
                          Budget(6144.0, "gpu-emulated", "gpu", None, 6144.0))
    assert gpu.resolution == GPU_RESOLUTION and gpu.censor_pct == GPU_CENSOR_PCT and gpu.budget_mib == 6144.0
    cpu = search_settings(MaxBatchRequest(framework="pytorch", model="tiny_cnn", granularity="exact"),
                          Budget(520.0, "cpu-rlimit-data", "cpu", 520.0, 0.0))
    assert cpu.resolution == Resolution(1, 0.0) and cpu.censor_pct == 0.0
    assert MaxBatchRequest(framework="pytorch", model="tiny_cnn").resolution("cpu") == CPU_RESOLUTION


def test_a_granularity_is_parsed_once_into_a_value(monkeypatch):
    """Issue 39: the text is parsed when the request is made, and the request holds the value from then on."""
    from harness.maxbatch import request as request_module

    req = MaxBatchRequest(framework="pytorch", model="tiny_cnn", memory_limit_mib=600, max_batch_cap=20,
                          granularity="8,2%")
    assert req.granularity == Resolution(8, 2.0)
    assert MaxBatchRequest(framework="pytorch", model="tiny_cnn", granularity="").granularity is None
    with pytest.raises(ConfigError, match="--granularity"):  # refused when the request is made
        MaxBatchRequest(framework="pytorch", model="tiny_cnn", granularity="8,16")
    parsed: list[str] = []
    monkeypatch.setattr(request_module.Resolution, "parse", classmethod(lambda cls, text, name="": parsed.append(text)))
    assert req.resolution("cpu") == req.resolution("gpu") == Resolution(8, 2.0) and req.search_cap("cpu")[0] == 16
    assert search_settings(req, Budget(600.0, "cpu-rlimit-data", "cpu", 600.0, 0.0)).resolution == Resolution(8, 2.0)
    assert parsed == []  # nothing read the text again


def test_a_what_helps_run_prints_each_searchs_bracket_and_the_wall_time(tmp_path, fake_executor, capsys):
    fake_executor()
    assert _maxbatch(tmp_path / "out", 385.0, "--env", "MALLOC_MMAP_THRESHOLD_=131072", "--no-plain") == 0
    printed = capsys.readouterr().out
    assert "-> between 28 (fits) and 29 (fails)" in printed
    assert "wall time:" in printed and "for 1 searches" in printed


def test_the_cap_is_snapped_onto_the_resolutions_grid_and_said():
    # issue 43: a capped search answered off its own grid (--max-batch-cap 20 --granularity 8 stored 20)
    from harness.maxbatch.request import MaxBatchRequest

    req = MaxBatchRequest("pytorch", "tiny_cnn", memory_limit_mib=600, max_batch_cap=20, granularity="8")
    cap, note = req.search_cap("cpu")
    assert cap == 16 and "--max-batch-cap 20" in note and "multiples of 8" in note and "stops at 16" in note
    assert MaxBatchRequest("pytorch", "tiny_cnn", memory_limit_mib=600, max_batch_cap=24,
                           granularity="8").search_cap("cpu") == (24, "")
    assert MaxBatchRequest("pytorch", "tiny_cnn", max_batch_cap=20).search_cap("gpu")[0] == 16  # 8,1% on a GPU
    assert MaxBatchRequest("pytorch", "tiny_cnn", memory_limit_mib=600, max_batch_cap=20).search_cap("cpu") == (20, "")
    assert MaxBatchRequest("pytorch", "tiny_cnn", max_batch_cap=5).search_cap("gpu") == (5, "")  # below the step


@pytest.mark.parametrize("value, message", [("-1", "must be >= 1"), ("0", "must be >= 1")])
def test_the_cap_states_one_bound(value, message):
    # issue 43: -1 was told ">= 0", then 0 ">= 1"
    from harness.maxbatch.request import MaxBatchRequest

    with pytest.raises(ConfigError, match=f"--max-batch-cap {value} {message}"):
        MaxBatchRequest("pytorch", "tiny_cnn", memory_limit_mib=600, max_batch_cap=int(value))
