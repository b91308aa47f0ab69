"""benchmarks/maxbatch_sim.py: the real search against simulated memory laws (pure, fast)."""

from __future__ import annotations

import json
import sys

import pytest

from tests import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import maxbatch_sim


def test_simulator_prints_one_line_per_law_and_strategy_and_meets_the_goal(capsys: pytest.CaptureFixture[str]):
    assert maxbatch_sim.main(["--check"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    laws = {name for name, _ in maxbatch_sim.laws()}
    assert {(r["law"], r["strategy"]) for r in rows} == {(law, s) for law in laws for s in ("model", "double-bisect")}
    for r in rows:
        assert {"law", "strategy", "probes", "error_pct", "answer", "truth"} <= r.keys()
        assert 0 <= r["error_pct"] <= maxbatch_sim.GOAL_ERROR_PCT, r
    model = {r["law"]: r for r in rows if r["strategy"] == "model"}
    bisect = {r["law"]: r for r in rows if r["strategy"] == "double-bisect"}
    for law in maxbatch_sim.GOAL_LAWS:
        assert model[law]["probes"] <= maxbatch_sim.GOAL_PROBES, model[law]
        assert model[law]["probes_mean"] <= 0.5 * bisect[law]["probes_mean"], (model[law], bisect[law])
    assert model["h100"]["truth"] == 2630 and model["h100"]["answer"] % 8 == 0


def test_the_goal_check_fails_when_a_law_needs_too_many_probes():
    rows = [{"law": law, "strategy": "model", "probes": 3, "error_pct": 0.1} for law in maxbatch_sim.GOAL_LAWS]
    assert maxbatch_sim.meets_goal(rows)
    rows[1] = dict(rows[1], probes=maxbatch_sim.GOAL_PROBES + 1)
    assert not maxbatch_sim.meets_goal(rows)
    rows[1] = dict(rows[1], probes=3, error_pct=1.5)
    assert not maxbatch_sim.meets_goal(rows)


def test_h100_fixture_interpolates_the_measured_points():
    law = maxbatch_sim.h100()
    assert maxbatch_sim.interpolate(maxbatch_sim.H100_RESERVED_MIB, 1714) == 4032.0
    assert 4032.0 < maxbatch_sim.interpolate(maxbatch_sim.H100_RESERVED_MIB, 1800) < 4398.0
    assert law.fits(2630) and not law.fits(2631) and law.truth() == 2630
