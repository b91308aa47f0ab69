"""Precision end to end with the framework-free fake adapter, as a user runs it: what ran is stored, a precision
that did not run fails its trial, and what cannot run is refused with exit 2 before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment, rows


@pytest.mark.process
def test_the_observed_compute_dtype_is_stored_with_each_trial(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, variants="RAW:{plain = {precision = \"fp32\"}, half = {precision = \"bf16\"}}")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    seen = {r["variant"]: (r["status"], r["precision"], r["compute_dtype"]) for r in rows(tmp_path / "out")}
    assert seen == {"plain": ("ok", "fp32", "float32"), "half": ("ok", "bf16", "bfloat16")}


@pytest.mark.process
def test_a_precision_the_adapter_did_not_apply_fails_the_trial_instead_of_being_stored_as_run(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, precision="bf16")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), behaviour="ignores_precision")
    assert done.returncode == 0, done.stderr  # a failed trial is a row; the sweep goes on
    [row] = rows(tmp_path / "out")
    assert row["status"] == "error" and row["compute_dtype"] is None
    assert "precision = 'bf16' was asked for" in row["reason"] and "computed in float32" in row["reason"]


def test_amp_on_a_cpu_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, frameworks=["pytorch"], precision="amp", device="cpu")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "precision", "'amp' is not run by the pytorch adapter on the CPU", "set precision = 'fp32'")
    assert not (tmp_path / "out").exists()


def test_cuda_allocator_settings_on_a_cpu_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, frameworks=["pytorch"], device="cpu")
    exp.write_text(exp.read_text() + "\n[adapters.pytorch]\nexpandable_segments = true\n")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "adapters.pytorch", "expandable_segments", "CUDA GPU only", "would not be applied")
    assert not (tmp_path / "out").exists()


def test_a_max_batch_search_for_amp_on_a_cpu_writes_nothing(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--precision", "amp",
              "--device", "cpu", "--memory-limit-mib", "1024", "--out", str(tmp_path / "mb"))
    assert_refused(done, "--precision 'amp'", "pytorch adapter on the CPU", "or --device 'gpu'")
    assert not (tmp_path / "mb").exists()
