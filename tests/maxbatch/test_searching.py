"""The max-batch search as one object (issue 39): built once, reporting to a listener with typed messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.maxbatch import budget, searching
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
    real = budget.resolve_budget
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
