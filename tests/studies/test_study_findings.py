"""Each study's verdict follows the numbers: tables of trial rows in, holds / does not hold out.

The rows are hand-written inputs to pure functions (not results shown anywhere); the end-to-end test
runs a real variant sweep into a store and reads the report and ``compare`` from it.
"""

from __future__ import annotations

import io

import pytest

from harness.cells import Series
from report.answer.studies import holds_to, line_label, study_findings, variant_names


def row(variant: str, batch: int, acc: float | None = None, speed: float = 100.0, rss: float = 500.0,
        fw: str = "pytorch", repeat: int = 0, accumulate: int = 1) -> dict:
    return {"framework": fw, "variant": variant, "batch_size": batch, "effective_batch_size": batch * accumulate,
            "accumulate_steps": accumulate, "status": "ok", "purpose": "sweep", "accuracy": acc,
            "step_samples_per_s": speed, "rss_peak_mib": rss, "repeat": repeat}


def spec(study: str, **variants: dict) -> dict:
    return {"study": study, "variants": [{"name": n, "settings": s} for n, s in variants.items()],
            "optimizer": "sgd", "lr_policy": "fixed", "augment": "none"}


def test_holds_to_is_the_largest_batch_within_tolerance_of_the_best():
    by_batch = {16: [row("a", 16, 0.90)], 64: [row("a", 64, 0.895)], 256: [row("a", 256, 0.80)]}
    assert holds_to(by_batch) == (64, pytest.approx(90.0), 16)


@pytest.mark.parametrize("adam_at_64, holds", [(0.895, True), (0.70, False)])
def test_optimizer_batch_verdict_follows_the_accuracies(adam_at_64, holds):
    s = spec("optimizer_batch", sgd={"optimizer": "sgd"}, adam={"optimizer": "adam"})
    trials = [row("sgd", 16, 0.9), row("sgd", 64, 0.85), row("sgd", 256, 0.7),
              row("adam", 16, 0.9), row("adam", 64, adam_at_64), row("adam", 256, 0.6)]
    [f] = study_findings(s, trials)
    assert f.holds is holds and "sgd (sgd)" in f.evidence and "adam (adam)" in f.evidence
    assert "up to batch 16" in f.evidence  # SGD holds only to 16


def test_optimizer_batch_without_adam_cannot_be_judged():
    [f] = study_findings(spec("optimizer_batch", sgd={"optimizer": "sgd"}), [row("sgd", 16, 0.9)])
    assert f.holds is None and "needs an Adam and an SGD variant" in f.evidence


def test_augmentation_compares_the_best_batches():
    s = spec("augmentation", plain={"augment": "none"}, aug={"augment": "crop"})
    trials = [row("plain", 16, 0.95), row("plain", 64, 0.90), row("aug", 16, 0.90), row("aug", 64, 0.93)]
    [f] = study_findings(s, trials)
    assert f.holds is True and "aug (augment crop) best 93.0% at batch 64" in f.evidence
    trials[3]["accuracy"] = 0.5
    assert study_findings(s, trials)[0].holds is False


def test_lr_scaling_picks_the_flattest_rule():
    s = spec("lr_scaling", fixed={"lr_policy": "fixed"}, linear={"lr_policy": "linear"})
    trials = [row("fixed", 16, 0.95), row("fixed", 256, 0.60), row("linear", 16, 0.94), row("linear", 256, 0.90)]
    [f] = study_findings(s, trials)
    assert f.holds is True and "flattest: linear" in f.evidence and "spans 35.0 pp" in f.evidence
    trials[3]["accuracy"] = 0.5
    [f] = study_findings(s, trials)
    assert f.holds is False and "flattest: fixed" in f.evidence


def test_batch_shapes_needs_the_difference_to_exceed_the_noise():
    s = {"study": "batch_shapes"}
    clear = [row("", b, speed=v + r) for b, v in ((500, 100.0), (512, 120.0)) for r in (0, 1, 2)]
    [f] = study_findings(s, clear)
    # sd 1 over 3 repeats each: Welch's df = 4, t = 2.78, so the noise is 2.78 x sqrt(2/3) = 2.3
    assert f.holds is True and "(+19.8%, noise ±2.3" in f.evidence
    noisy = [row("", b, speed=v + r) for b, v in ((500, 100.0), (512, 101.0)) for r in (0, 10, 20)]
    assert study_findings(s, noisy)[0].holds is False
    two = [row("", b, speed=v + r) for b, v in ((500, 100.0), (512, 130.0)) for r in (0, 10)]
    assert study_findings(s, two)[0].holds is False  # +30 with sd 7 from 2 repeats: t(1) = 12.7 swallows it
    single = [row("", 500, speed=100.0), row("", 512, speed=130.0)]
    [f] = study_findings(s, single)
    assert f.holds is None and "no noise estimate" in f.evidence


def test_oom_mitigation_compares_at_the_same_effective_batch():
    s = spec("oom_mitigations", plain={}, acc4={"accumulate_steps": 4})
    trials = [row("plain", 256, rss=900.0, speed=400.0), row("plain", 1024, rss=2000.0, speed=500.0),
              row("acc4", 64, rss=600.0, speed=300.0, accumulate=4),
              row("acc4", 256, rss=900.0, speed=350.0, accumulate=4)]
    [f] = study_findings(s, trials)
    assert f.framework == "pytorch" and f.variant == "acc4" and f.name == "pytorch · acc4" and f.holds is True
    assert f.text.startswith("pytorch · acc4: “the mitigation lowers peak memory at the same effective batch” holds: ")
    assert "at effective batch 1024" in f.evidence and "1100 MiB saved" in f.evidence and "-30.0%: a cost" in f.evidence
    trials[3]["rss_peak_mib"] = 1990.0  # 10 MiB less: within 2 % of the plain run's peak, not a saving
    assert study_findings(s, trials)[0].holds is False


def test_series_labels_and_variant_order():
    trials = [row("b", 16), row("a", 16)]
    assert [line_label(Series.of(t).line) for t in trials] == ["pytorch · b", "pytorch · a"]
    assert [t["framework"] for t in trials] == ["pytorch", "pytorch"]  # a line's label never replaces the framework
    assert variant_names(trials, spec("x", b={}, a={})) == ["b", "a"]
    assert line_label(Series.of(row("", 16)).line) == "pytorch"


def test_compare_prints_the_study_table_and_verdicts():
    from harness.cli.compare import render_study

    s = spec("optimizer_batch", sgd={"optimizer": "sgd"}, adam={"optimizer": "adam"}) | {"name": "ob"}
    trials = [row("sgd", 16, 0.9), row("sgd", 64, 0.5), row("adam", 16, 0.9), row("adam", 64, 0.9)]
    for t in trials:
        t.update(step_time_ms_median=1.0, framework_peak_mib=None, gpu_util_pct=None)
    buf = io.StringIO()
    render_study(trials, s, file=buf)
    text = buf.getvalue()
    assert "Claim tested: Adam holds accuracy to a larger batch than SGD" in text
    assert "variant" in text and "adam" in text and "[holds] pytorch" in text
