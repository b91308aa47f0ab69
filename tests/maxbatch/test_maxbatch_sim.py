"""benchmarks/maxbatch_sim.py: the real search against simulated memory laws (pure, fast)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from tests import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import maxbatch_sim


def test_simulator_prints_one_line_per_law_and_strategy_and_meets_the_goal(capsys: pytest.CaptureFixture[str]):
    assert maxbatch_sim.main(["--check"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    laws = {name for name, _ in maxbatch_sim.laws()}
    strategies = ("model", "double-bisect", "model+estimate")
    assert {(r["law"], r["strategy"]) for r in rows} == {(law, s) for law in laws for s in strategies}
    assert {r["estimate_error_pct"] for r in rows if r["strategy"] == "model+estimate"} == {
        round(e * 100) for e in maxbatch_sim.ESTIMATE_ERRORS}
    for r in rows:
        assert {"law", "strategy", "probes", "error_pct", "answer", "truth"} <= r.keys()
        if r["law"] != "moving":  # a boundary that moves between processes is answered to its spread (below)
            assert 0 <= r["error_pct"] <= maxbatch_sim.GOAL_ERROR_PCT, r
    model = {r["law"]: r for r in rows if r["strategy"] == "model"}
    bisect = {r["law"]: r for r in rows if r["strategy"] == "double-bisect"}
    for law in maxbatch_sim.GOAL_LAWS:
        assert model[law]["probes"] <= maxbatch_sim.GOAL_PROBES, model[law]
        assert model[law]["probes_mean"] <= 0.5 * bisect[law]["probes_mean"], (model[law], bisect[law])
    assert model["h100"]["truth"] == 2630 and model["h100"]["answer"] % 8 == 0


def test_an_estimate_up_to_half_off_costs_no_more_than_the_fitted_line_and_one_a_fifth_off_at_most_six_probes():
    # issue 41: a right estimate saves probes on every law; one 50 % off either way never costs more than no estimate
    # (the fitted line), the stress laws included; one up to 20 % off stays within ESTIMATE_GOAL_PROBES on the exact
    # line and on the H100's curved, censored one (8 probes there before: the predicted size failed, and the bracket
    # it left was bisected above a censored figure). Where the goal is still missed (the fragmentation a pool's
    # allocated figure does not show, +-3 MiB of noise over a 2x extrapolation) the simulator says so on stderr and
    # docs/maxbatch.md why
    rows = maxbatch_sim.table()
    plain = {r["law"]: r for r in rows if r["strategy"] == "model"}
    est = {(r["law"], r["estimate_error_pct"]): r for r in rows if r["strategy"] == "model+estimate"}
    for law in ("linear", "h100", "pool", "cpu-noise", "alloc-frag", "pool-figure"):
        assert est[(law, 0)]["probes"] < plain[law]["probes"], (est[(law, 0)], plain[law])
        for off in (-50, 50):
            assert est[(law, off)]["probes"] <= plain[law]["probes"], (est[(law, off)], plain[law])
    for law in ("linear", "h100"):
        for off in (-20, -5, 0, 5, 20):
            assert est[(law, off)]["probes"] <= maxbatch_sim.ESTIMATE_GOAL_PROBES, est[(law, off)]
    misses = maxbatch_sim.estimate_goal_misses(rows)
    assert all(m["law"] not in ("linear", "h100") for m in misses), misses


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


@pytest.mark.parametrize("granularity", ["exact", "0%", "1%", "8"])
@pytest.mark.parametrize("strategy", ["model", "double-bisect"])
def test_a_boundary_that_moves_between_processes_is_answered_to_its_spread_within_a_probe_bound(granularity, strategy):
    # issue 43: under glibc's defaults the boundary moves by tens of MiB from process to process, and an exact search
    # took 7 probes in one run, 17 in another, and 20+ workers in two more; every search of the moving law stops
    # within MOVING_PROBES (confirm runs included), at a size that fitted twice, below a size that failed
    from harness.maxbatch.search import Resolution

    res = Resolution.parse(granularity)
    law = maxbatch_sim.moving()
    truth, spread = law.truth(), math.ceil(maxbatch_sim.MOVING_MIB / 0.5)  # the law's 0.5 MiB per sample
    stopped = 0
    for seed in range(40):
        result = maxbatch_sim.simulate_search(law, strategy, seed, res)
        assert result.probes_n <= maxbatch_sim.MOVING_PROBES, (seed, [(p.batch, p.status) for p in result.probes])
        answer, fail = result.max_batch, result.first_fail
        assert fail is not None and fail.status == "oom" and answer < fail.batch, (seed, answer, fail)
        confirmed = [p for p in result.probes if p.confirm and p.batch == answer]
        assert confirmed and confirmed[-1].status == "ok", seed  # the bracket it defends: the answer fitted twice
        assert answer <= truth + spread, (seed, answer)  # no answer beyond what the luckiest process holds
        if fail.batch - answer > res.allowed(answer):  # wider than asked: said, with the spread that made it so
            stopped += 1
            assert "process-to-process spread" in result.note and f"not at resolution {res.label}" in result.note
            assert f"{answer} fitted" in result.note and f"{fail.batch} ran out of memory" in result.note
        else:
            assert result.note == ""
    if res.tolerance_pct == 0:  # an exact search cannot resolve this law: it said so, most of the time
        assert stopped >= 20, stopped


def test_a_capped_search_answers_on_its_grid():
    # issue 43: --max-batch-cap 20 --granularity 8 probed 1, 16, 20 and stored 20 with resolution 8
    from harness.maxbatch.search import Resolution

    law = maxbatch_sim.linear(290.0, 0.5, 520.0)
    for cap, answer in ((20, 16), (16, 16), (23, 16), (24, 24), (5, 5)):
        result = maxbatch_sim.simulate_search(law, "model", 0, Resolution.parse("8"), cap=cap)
        assert result.capped and result.max_batch == answer, (cap, result.max_batch)
        assert all(p.batch % 8 == 0 for p in result.probes if p.batch >= 8), [p.batch for p in result.probes]
