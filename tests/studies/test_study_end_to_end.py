"""A real variant sweep (PyTorch on CPU) into a store, then the report, ``compare`` and the export from it."""

from __future__ import annotations

import csv
import io
from contextlib import redirect_stdout

import pytest
from pypdf import PdfReader

from harness.config.experiment import parse_experiment
from harness.run.sweep import SweepOptions, run_sweep
from harness.store import Store


@pytest.mark.slow
def test_an_optimizer_study_runs_end_to_end(tmp_path, cache_dir):
    exp = parse_experiment({
        "name": "ob_tiny", "study": "optimizer_batch", "frameworks": ["pytorch"], "model": "tiny_cnn",
        "dataset": "digits", "train_samples": 128, "batch_sizes": [16, 64], "epochs": 1, "warmup_steps": 1,
        "timed_steps": 2, "threads": 1, "device": "cpu", "timeout_s": 600, "augment": "crop", "augment_pad_px": 1,
        "variants": {"sgd": {"optimizer": "sgd", "learning_rate": 0.05},
                     "adam": {"optimizer": "adam", "learning_rate": 0.001, "accumulate_steps": 2}},
    }, source="inline")
    out = tmp_path / "run"
    result = run_sweep(exp, out, SweepOptions(cache_dir=cache_dir))
    assert [(o.trial.variant, o.trial.batch_size, o.status) for o in result.outcomes] == [
        ("sgd", 16, "ok"), ("sgd", 64, "ok"), ("adam", 16, "ok"), ("adam", 64, "ok")]
    with Store.open(out, create=False) as store:
        rows = store.trials()
    by = {(r["variant"], r["batch_size"]): r for r in rows}
    assert by[("adam", 64)]["effective_batch_size"] == 128 and by[("adam", 64)]["accumulate_steps"] == 2
    assert by[("adam", 64)]["optimizer_updates_n"] == 1 and by[("sgd", 64)]["optimizer_updates_n"] == 2
    assert {r["augment"] for r in rows} == {"crop"} and {r["optimizer"] for r in rows} == {"sgd", "adam"}
    # resuming plans the same hashes: nothing runs again
    assert run_sweep(exp, out, SweepOptions(cache_dir=cache_dir, resume=True)).already_done == 4

    from harness.cli.compare import cmd_compare

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cmd_compare(type("Args", (), {"dir": str(out), "experiment": None})()) == 0
    text = buf.getvalue()
    assert "Claim tested: Adam holds accuracy to a larger batch than SGD" in text
    assert "] pytorch: Adam holds" in text and "adam (adam) best" in text

    from report.document.build import build_report

    built = build_report(out)
    pdf = "\n".join(page.extract_text() or "" for page in PdfReader(built.pdf).pages)
    assert "The study's question" in pdf and "pytorch · adam" in pdf and "pytorch · sgd" in pdf
    assert "Adam holds accuracy to a larger batch than SGD" in pdf
    assert built.figures

    from harness.store.export import export

    [trials_csv] = [p for p in export(out, "csv") if p.name == "trials.csv"]
    with trials_csv.open() as f:
        assert {r["variant"] for r in csv.DictReader(f)} == {"sgd", "adam"}
