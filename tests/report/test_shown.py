"""The report's sampler metrics follow from the field table's ``shown`` (harness/monitor/fields.py), nothing else.

Each field marked shown must appear, with its own label and unit, in the report's metric list, in the headline
table and in each figure its ``shown`` names, and a field marked shown nowhere in none of them: so a new sampler
metric needs the field table and its probe only.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pytest

from harness.cells import METRICS, cells
from harness.monitor.fields import FIELDS, shown_in
from report.document import figures
from report.document.tables import MEMORY_COLUMNS, SPEED_COLUMNS, headline
from report.load import StoredExperiment

SHOWN = [f for f in FIELDS if f.trial_column and f.shown]


def _trials() -> list[dict[str, Any]]:
    out = []
    for bs in (8, 64):
        row: dict[str, Any] = {"framework": "pytorch", "batch_size": bs, "repeat": 0, "status": "ok",
                               "purpose": "sweep", "trial_hash": f"h{bs}", "device": "cuda:0",
                               "step_samples_per_s": 10.0 * bs, "accuracy": None, "energy_j": 5.0}
        for f in FIELDS:
            if f.trial_column:
                row.setdefault(f.trial_column, 10.0 + bs)
        out.append(row)
    return out


def test_every_shown_field_is_a_report_metric_with_the_field_tables_label_and_unit() -> None:
    assert SHOWN, "the field table shows nothing"
    for f in SHOWN:
        m = METRICS[f.trial_column]  # type: ignore[index]
        assert (m.unit, m.fmt) == (f.unit, f.fmt) and f.label in m.label
    hidden = {f.trial_column for f in FIELDS if f.trial_column and not f.shown}
    assert hidden and not hidden & set(METRICS)  # energy_j: stored and exported, summarised as j_per_sample


@pytest.mark.parametrize(("place", "columns", "title"), [("speed table", SPEED_COLUMNS, "speed"),
                                                         ("memory table", MEMORY_COLUMNS, "memory")])
def test_a_headline_table_holds_exactly_the_fields_shown_there(place: str, columns: tuple[str, ...],
                                                               title: str) -> None:
    sampler_columns = {f.trial_column for f in FIELDS if f.trial_column}
    assert [c for c in columns if c in sampler_columns] == list(shown_in(place))  # type: ignore[arg-type]
    table = headline(cells(_trials()), columns, title, title)
    assert table is not None
    for f in SHOWN:
        assert any(h.startswith(f.label) for h in table.headers) == (place in f.shown), (f.name, table.headers)


def test_each_figure_draws_a_panel_for_every_field_shown_in_it() -> None:
    trials = _trials()
    exp = StoredExperiment(name="shown", runs=(), trials=tuple(trials))
    drawn = {fig.key: fig for fig in figures.build_figures(exp, cells(trials))}
    try:
        for f in SHOWN:
            for place in f.shown:
                if not place.endswith(" figure"):
                    continue
                fig = drawn[place.removesuffix(" figure")]
                assert fig.figure is not None, (place, fig.absent_reason)
                titles = [ax.get_title() for ax in fig.figure.axes]
                assert any(t.startswith(f.label) for t in titles), (f.name, place, titles)
    finally:
        for fig in drawn.values():
            if fig.figure is not None:
                plt.close(fig.figure)
