"""Names that code reading the store used before 0.9 still resolve, with a warning naming the new one (CHANGELOG)."""

from __future__ import annotations

import pytest

import report.load


def test_report_load_experiment_is_the_stored_experiment_with_a_warning():
    with pytest.warns(DeprecationWarning, match="report.load.StoredExperiment"):
        old = report.load.Experiment  # type: ignore[attr-defined]
    assert old is report.load.StoredExperiment
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        report.load.Nothing  # type: ignore[attr-defined]  # noqa: B018
