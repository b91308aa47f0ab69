"""A real search where the boundary moves between processes (issue 43): PyTorch's tiny_cnn on CPU under glibc's
default malloc, whose boundary moves by tens of MiB from one fresh process to the next (docs/maxbatch.md). An exact
search must stop at what the processes let it tell apart, within a stated number of probes, and a capped search
must answer on its grid."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.resolution import Resolution
from harness.store import Store
from tests.tiers import SEARCH_CODE

#: the most probes (confirm runs included) the exact search of the moving boundary may take: the simulator's bound
#: for its moving law (benchmarks/maxbatch_sim.py, MOVING_PROBES), plus retries of probes that crash
REAL_MOVING_PROBES = 26
ARGS = ("maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu", "--threads", "1",
        "--memory-limit-mib", "600", "--settle-steps", "5", "--quiet")


def _search(tmp_path: Path, *extra: str) -> tuple[int, str, dict]:
    out = tmp_path / "out"
    printed = io.StringIO()
    with redirect_stdout(printed), redirect_stderr(printed):
        code = main([*ARGS, *extra, "--out", str(out)])
    with Store.open(out, create=False) as store:
        rows = store.maxbatch_results()
    assert len(rows) == 1, printed.getvalue()[-3000:]
    return code, printed.getvalue(), rows[0]


@pytest.mark.slow
@pytest.mark.heavy(*SEARCH_CODE)  # exact
@pytest.mark.alone  # a boundary under an OS memory limit
def test_an_exact_search_of_a_moving_boundary_stops_within_the_probe_bound(tmp_path):
    code, printed, row = _search(tmp_path, "--granularity", "exact")
    assert code == 0, printed[-3000:]
    probes = json.loads(row["probes_json"])
    assert row["probes_n"] == len(probes) <= REAL_MOVING_PROBES, [(p["batch"], p["status"]) for p in probes]
    best, fail = row["max_batch"], row["first_fail_batch"]
    assert fail is not None and best < fail and row["first_fail_status"] == "oom", (best, fail)
    confirmed = [p for p in probes if p["confirm"] and p["batch"] == best]
    assert confirmed and confirmed[-1]["status"] == "ok"  # the bracket it defends: the answer fitted twice
    if fail - best > Resolution.parse("exact").allowed(best):  # wider than asked: the row and the output say why
        assert "process-to-process spread" in row["resolution_note"], row["resolution_note"]
        assert row["resolution_note"] in printed
        assert "--granularity exact to try them" not in printed


@pytest.mark.slow
def test_a_capped_search_answers_on_its_grid(tmp_path):
    # under a budget the cap's process (~306 MiB at 16) leaves more than its own peak of unused, so the answer needs
    # no settling runs (cap_skips_settling), which are not what this checks: 3 workers fewer (issue 42); the last
    # --memory-limit-mib given is the one argparse keeps
    code, printed, row = _search(tmp_path, "--max-batch-cap", "20", "--granularity", "8", "--memory-limit-mib", "800")
    assert code == 0, printed[-3000:]
    assert row["budget_mib"] == 800 and not row["heap_settle_json"], (row["budget_mib"], row["heap_settle_json"])
    assert "--max-batch-cap 20 is not on the resolution's grid (multiples of 8" in printed
    assert row["capped"] == 1 and row["max_batch"] == 16 and row["resolution"] == "8", row
    assert all(p["batch"] % 8 == 0 for p in json.loads(row["probes_json"]) if p["batch"] >= 8)
    assert "stops at 16" in (row["resolution_note"] or "")
