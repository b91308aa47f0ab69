"""Issue 38, item 4: what differs between the frameworks' environments is said (``compare``, the report's
environment rows, ``recommend --json``); nothing is said where nothing differs."""

from __future__ import annotations

from report.answer.environments import version_differences


def test_different_numpy_majors_are_named_with_each_frameworks_version() -> None:
    notes = version_differences({"mxnet": {"numpy": "1.26.4", "mxnet": "1.9.1"},
                                 "pytorch": {"numpy": "2.4.6", "torch": "2.13.0+cpu"}})
    assert len(notes) == 1 and "numpy major" in notes[0]
    assert "mxnet numpy 1.26.4" in notes[0] and "pytorch numpy 2.4.6" in notes[0]


def test_the_same_major_and_cuda_only_where_reported_say_nothing_and_a_cuda_difference_is_named() -> None:
    assert version_differences({"jax": {"numpy": "2.4.6"}, "pytorch": {"numpy": "2.3.1", "cuda": "13.0"}}) == []
    notes = version_differences({"tensorflow": {"numpy": "2.4.6", "cuda": "12.9"},
                                 "pytorch": {"numpy": "2.4.6", "cuda": "13.0"}})
    assert len(notes) == 1 and "CUDA" in notes[0] and "tensorflow cuda 12.9" in notes[0]
