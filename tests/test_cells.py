"""One statistic per cell: the CLI table, ``compare`` and the report print the same figure (harness/cells.py)."""

from __future__ import annotations

import io

import pytest

from harness.cells import METRICS, SUMMARY_NOTE, cells, summary_note, summary_rows
from harness.cli.compare import render
from report.answer.thesis import side_by_side
from report.document.tables import SPEED_COLUMNS, headline


def trial(fw: str, bs: int, rep: int, step: float, *, status: str = "ok", drifted: bool = False,
          denormals: str = "flush", precision: str = "fp32") -> dict:
    return {"framework": fw, "batch_size": bs, "repeat": rep, "status": status, "purpose": "sweep",
            "dataset": "digits", "epochs": 1, "device": "cpu", "precision": precision, "denormals": "flush",
            "cpu_denormals": denormals, "reason": "" if status == "ok" else "boom",
            "step_samples_per_s": step if status == "ok" else None,
            "e2e_samples_per_s": step * 0.8 if status == "ok" else None,
            "step_time_ms_median": 1000 * bs / step if step else None,
            "drift_change_pct": 120.0 if drifted else 2.0, "drift_flagged": 1 if drifted else 0,
            "accuracy": 0.9 + rep / 100, "gpu_util_pct": None}


TRIALS = [trial("pytorch", 4, 0, 400.0), trial("pytorch", 4, 1, 500.0), trial("pytorch", 4, 2, 0.0, status="error"),
          trial("mxnet", 4, 0, 300.0, drifted=True, denormals="keep")]


def test_a_cell_is_the_mean_and_sd_of_its_ok_trials_only():
    (mx, pt) = cells(TRIALS, ["mxnet", "pytorch"])
    step = pt.get("step_samples_per_s")
    assert step is not None and step.n == 2 and step.mean == 450.0 and step.sd == pytest.approx(70.71, abs=0.01)
    assert pt.status_text() == "1 error, 2 ok" and pt.drift_flagged_n == 0
    assert mx.drift_flagged_n == 1 and mx.drift_text() == "+120%" and mx.cpu_denormals == ("keep",)


def test_cli_compare_and_report_print_the_same_text_for_the_same_cell():
    fmt = METRICS["step_samples_per_s"].fmt
    expected = cells(TRIALS)[1].get("step_samples_per_s").text(fmt)  # type: ignore[union-attr]
    assert expected == "450 ± 71"
    cli = {r["framework"]: r for r in summary_rows(TRIALS)}
    assert cli["pytorch"]["step_samples_per_s"] == expected
    table = headline(cells(TRIALS), SPEED_COLUMNS, "speed", "Speed")
    assert table is not None
    col = table.headers.index("step throughput (samples/s)")
    assert [r[col] for r in table.rows if r[0] == "pytorch"] == [expected]
    out = io.StringIO()
    render(TRIALS, file=out)
    assert any(line.startswith("pytorch") and expected in line for line in out.getvalue().splitlines())
    # the thesis comparison's mean ± sd comes from the same implementation
    acc = {(r["framework"], r["metric"]): r for r in side_by_side(TRIALS)}[("pytorch", "accuracy_pct")]
    assert acc["ours"] == pytest.approx(cells(TRIALS)[1].get("accuracy_pct").mean)  # type: ignore[union-attr]
    assert acc["ours_sd"] == pytest.approx(cells(TRIALS)[1].get("accuracy_pct").sd)  # type: ignore[union-attr]


def test_trials_of_different_settings_are_separate_cells_with_a_variant_label():
    mixed = [trial("pytorch", 4, 0, 400.0), trial("pytorch", 4, 0, 100.0, precision="amp")]
    got = cells(mixed)
    assert sorted(c.variant for c in got) == ["amp", "fp32"]  # only the settings that differ name a series
    assert all(c.n == 1 for c in got)
    assert all(c.variant == "" for c in cells(TRIALS))  # one setting: no label
    # the device each framework names its own way ("cpu", "/CPU:0", "cpu(0)") is not a variant
    named = [trial("pytorch", 4, 0, 400.0), {**trial("mxnet", 4, 0, 300.0), "device": "cpu(0)"}]
    assert [c.variant for c in cells(named)] == ["", ""]


def _drifting(changes: list[float | None]) -> list[dict]:
    """One cell's repeats: a number is a flagged trial's change (%), None an unflagged one."""
    out = []
    for rep, change in enumerate(changes):
        t = trial("pytorch", 64, rep, 500.0, drifted=change is not None)
        t["drift_change_pct"] = 2.0 if change is None else change
        out.append(t)
    return out


@pytest.mark.parametrize(("changes", "reading"), [
    ([+40.0, +35.0], "every repeat"),  # the denormal case: every repeat slows down late
    ([-30.0, -25.0, -28.0], "every repeat"),
    ([+36.0, None], "not repeated"),  # measured on the quick replay: one repeat flagged, its twin flat
    ([+36.0, -20.0], "not repeated"),  # opposite signs cannot be the same workload change
    ([+50.0], "single"),
    ([None, None], ""),
])
def test_drift_is_read_from_its_repeats(changes, reading):
    (cell,) = cells(_drifting(changes))
    assert cell.drift_reading == reading


def test_the_drift_finding_says_whether_the_repeats_agree():
    from report.answer.findings import drift

    machine = drift(cells(_drifting([+36.0, None])), ["pytorch"])[0].text
    workload = drift(cells(_drifting([+40.0, +35.0])), ["pytorch"])[0].text
    assert "1 of 2 trial(s): not the same in every repeat: most likely the machine" in machine
    assert "2 of 2 trial(s): in every repeat, the same way: the workload's own change" in workload


def test_the_math_mode_splits_series_is_shown_beside_the_precision_and_a_mixed_comparison_is_named():
    from report.answer.findings import math_modes

    def gpu(fw: str, mode: str, seen: str, step: float) -> dict:
        return trial(fw, 4, 0, step) | {"device": "gpu", "math_mode": mode, "math_mode_seen": seen}

    rows = [gpu("pytorch", "ieee", "ieee", 100.0), gpu("pytorch", "tf32", "tf32", 240.0),
            gpu("jax", "framework-default", "tf32", 270.0)]
    table = {r["framework"]: r for r in summary_rows(rows, ["pytorch", "jax"])}
    assert set(table) == {"pytorch [ieee]", "pytorch [tf32]", "jax [framework-default]"}  # never one cell
    assert table["pytorch [ieee]"]["arithmetic"] == "fp32 ieee" and table["pytorch [tf32]"]["arithmetic"] == "fp32 tf32"
    assert summary_rows(TRIALS)[0]["arithmetic"] == "fp32 ?"  # stored before math modes were read back
    same = cells([rows[1], rows[2]], ["pytorch", "jax"])
    assert math_modes(same, ["pytorch", "jax"]) == []  # both TF32: comparable
    mixed = cells([rows[0], rows[2]], ["pytorch", "jax"])
    found = math_modes(mixed, ["pytorch", "jax"])
    assert len(found) == 1 and "pytorch: fp32 ieee; jax: fp32 tf32" in found[0].text
    cpu = [trial("pytorch", 4, 0, 1.0) | {"math_mode_seen": "n/a"}, trial("mxnet", 4, 0, 1.0)]
    assert math_modes(cells(cpu), ["pytorch", "mxnet"]) == []  # the CPU: the question does not arise


def test_the_summary_note_names_the_frameworks_whose_steps_were_timed_in_windows():
    """Issue 40: MXNet's step times are means over windows of queued steps; the command line's note says so, and
    only where an ok trial's clock was read over windows (1 or None: after every step)."""
    rows = [{"framework": "pytorch", "status": "ok", "step_clock_window": 1},
            {"framework": "jax", "status": "ok", "step_clock_window": None}]
    assert summary_note(rows) == SUMMARY_NOTE
    rows += [{"framework": "mxnet", "status": "ok", "step_clock_window": 4},
             {"framework": "mxnet", "status": "ok", "step_clock_window": 10},
             {"framework": "tensorflow", "status": "oom", "step_clock_window": 10}]
    note = summary_note(rows)
    assert note.startswith(SUMMARY_NOTE) and "mxnet (up to 10)" in note and "tensorflow" not in note
