"""The max-batch search as one object (issue 39): built once, reporting to a listener with typed messages; the old
entry points (run_maxbatch and its loose callbacks, harness.maxbatch.prober's names) still work, deprecated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.maxbatch import probes, request, searching
from harness.maxbatch.listener import Bracket, MaxBatchListener
from harness.maxbatch.request import MaxBatchRequest
from harness.maxbatch.searching import DataSource, MaxBatchSearch
from harness.records import ProbeResult, TrialOutcome
from harness.store import Store
from tests.fakes.memory_executor import BUDGET_MIB

REQ = MaxBatchRequest(framework="pytorch", model="tiny_cnn", device="cpu", memory_limit_mib=BUDGET_MIB, threads=1,
                      synthetic_shape=(1, 8, 8), synthetic_samples=64)


class Recorder(MaxBatchListener):
    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []

    def on_probe_complete(self, outcome: TrialOutcome) -> None:
        self.heard.append(("complete", outcome))

    def on_bracket(self, bracket: Bracket) -> None:
        self.heard.append(("bracket", bracket))


def test_the_search_resolves_its_budget_once_and_tells_its_listener_in_order(fake_executor, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake_executor()
    resolved: list[str] = []
    real = request.resolve_budget
    monkeypatch.setattr(searching, "resolve_budget",
                        lambda req, gpus, runtime=None: resolved.append(req.framework) or real(req, gpus, runtime))
    search = MaxBatchSearch.build(REQ, {"gpus": []}, data=DataSource(cache_dir=tmp_path / "cache"))
    assert resolved == ["pytorch"] and search.budget.kind == "cpu-rlimit-data" and search.description is not None
    heard = Recorder()
    with Store.open(tmp_path / "out") as store:
        found = search.run(store, store.begin_run("e", {}, "test", {}), heard)
        stored = store.maxbatch_answers()
    assert resolved == ["pytorch"]  # running it resolved nothing again
    assert found.row.answer.max_batch == 28 and stored == [found.row]
    brackets = [b for kind, b in heard.heard if kind == "bracket"]
    assert brackets and all(isinstance(b.probe, ProbeResult) for b in brackets)
    assert (brackets[-1].lo, brackets[-1].hi) == (28, 29)
    completed = [o for kind, o in heard.heard if kind == "complete"]
    assert len(completed) == len(found.outcomes) and all(isinstance(o, TrialOutcome) for o in completed)
    # every probe is told complete before the bracket it left
    first_bracket = next(i for i, (kind, _) in enumerate(heard.heard) if kind == "bracket")
    assert heard.heard[first_bracket - 1][0] == "complete"


def test_run_maxbatch_and_its_callbacks_still_work_with_a_deprecation_warning(fake_executor, tmp_path: Path) -> None:
    fake_executor()
    probes_seen: list[TrialOutcome] = []
    brackets: list[tuple[int, int | None]] = []
    with Store.open(tmp_path / "out") as store, pytest.warns(DeprecationWarning, match="run_maxbatch is deprecated"):
        found = searching.run_maxbatch(REQ, store, 0, gpus=[], env={}, cache_dir=tmp_path / "cache",
                                       on_probe=probes_seen.append,
                                       on_bracket=lambda probe, lo, hi: brackets.append((lo, hi)))
    assert found.row.answer.max_batch == 28 and found.row.env == {}  # the environment stored as given
    assert len(probes_seen) == len(found.outcomes) and brackets[-1] == (28, 29)


def test_the_old_prober_module_names_resolve_with_a_deprecation_warning() -> None:
    from harness.maxbatch import answer, prober

    with pytest.warns(DeprecationWarning, match="prober.WorkerProber is deprecated: import WorkerProber from "
                                                "harness.maxbatch.probes"):
        assert prober.WorkerProber is probes.WorkerProber
    with pytest.warns(DeprecationWarning, match="import answer_record from harness.maxbatch.answer"):
        assert prober.result_row is answer.answer_record
    with pytest.warns(DeprecationWarning, match="run_maxbatch from harness.maxbatch.searching"):
        assert prober.run_maxbatch is searching.run_maxbatch
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        prober.nothing_here  # noqa: B018


def test_the_searchs_memory_line_keeps_its_old_name_with_a_warning() -> None:
    # issue 39: one LinearFit in the project (harness.numbers, least squares); the search's line is SearchLine
    from harness.maxbatch import search
    from harness.numbers import LinearFit

    with pytest.warns(DeprecationWarning, match="LinearFit is now SearchLine"):
        assert search.LinearFit is search.SearchLine
    assert search.SearchLine is not LinearFit
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        search.nothing_here  # noqa: B018
