"""Variants within one experiment: parsing, refusals, the plan, the hash, the store and the CLI table."""

from __future__ import annotations

import pytest

from harness.config.experiment import VARIANT_KEYS, parse_experiment
from harness.config.trial import OptimizerSpec, TrialSpec
from harness.errors import ConfigError
from harness.run.planner import plan
from harness.run.sweep import summarise

BASE = {"name": "t", "frameworks": ["pytorch", "mxnet"], "batch_sizes": [16, 4], "repeats": 2,
        "dataset": "synthetic", "synthetic_shape": [1, 12, 12], "synthetic_samples": 64}
VARIANTS = {"sgd": {"optimizer": "sgd", "learning_rate": 0.05, "lr_policy": "linear"},
            "adam": {"optimizer": "adam", "learning_rate": 0.001, "augment": "crop_flip", "augment_pad_px": 2,
                     "accumulate_steps": 2}}


def parse(**changes):
    return parse_experiment({**BASE, **changes}, source="exp.toml")


def test_each_variant_is_the_experiment_with_its_settings(tiny_data):
    exp = parse(variants=VARIANTS)
    resolved = dict(exp.resolved_variants())
    assert list(resolved) == ["sgd", "adam"]  # file order
    assert resolved["sgd"].optimizer == "sgd" and resolved["sgd"].lr_policy == "linear"
    assert resolved["adam"].optimizer == "adam" and resolved["adam"].augment == "crop_flip"
    assert resolved["adam"].repeats == 2  # shared settings stay


def test_plan_is_variant_x_framework_x_batch_x_repeat(tiny_data):
    trials = plan(parse(variants=VARIANTS, synthetic_shape=[1, 8, 8]), tiny_data)
    assert len(trials) == 2 * 2 * 2 * 2
    assert len({t.trial_hash for t in trials}) == len(trials)
    keys = [(t.framework, t.variant, t.batch_size) for t in trials]
    assert keys[:4] == [("pytorch", "sgd", 4)] * 2 + [("pytorch", "sgd", 16)] * 2  # ascending within a variant
    adam = [t for t in trials if t.variant == "adam"]
    assert {t.optimizer.name for t in adam} == {"adam"} and {t.accumulate_steps for t in adam} == {2}
    assert {t.augment for t in adam} == {"crop_flip"}
    # linear scaling from lr_base_batch 32 by the effective batch (micro-batch x accumulation steps)
    sgd16 = next(t for t in trials if t.variant == "sgd" and t.batch_size == 16)
    assert sgd16.optimizer.lr == pytest.approx(0.05 * 16 / 32)


def test_an_experiment_without_variants_keeps_its_old_trial_hashes():
    # computed with the TrialSpec of schema 2 before variants existed (a03154071ea7ed81a0b1 under schema 1, whose
    # trials ran without the denormals setting and whose stores are refused): the variant fields, at their
    # defaults, must not move it, so a store made without them resumes
    trial = TrialSpec(experiment="quick", framework="pytorch", model="osu_cnn", dataset="mnist5k", batch_size=16,
                      repeat=0, seed=0, epochs=2, warmup_steps=3, timed_steps=20,
                      optimizer=OptimizerSpec(name="adam", lr=0.001), device="auto", threads=1, timeout_s=300.0,
                      data_key="k", math_mode="framework-default")  # what a trial on "auto" ran before math modes
    assert trial.trial_hash == "0672c6a6f53a02428930"
    import dataclasses

    # the math mode (issue 29): the default ieee is a new identity under "auto" (such a trial on a GPU ran TF32 where
    # its framework turned it on), and a stored spec without the key reads as what it ran
    assert dataclasses.replace(trial, math_mode="ieee").trial_hash != trial.trial_hash
    old = trial.to_dict()
    del old["math_mode"]
    assert TrialSpec.from_dict(old).math_mode == "framework-default"
    assert TrialSpec.from_dict(old).trial_hash == trial.trial_hash

    for change in ({"variant": "adam"}, {"augment": "crop"}, {"accumulate_steps": 2}):
        assert dataclasses.replace(trial, **change).trial_hash != trial.trial_hash, change
    # the padding matters only when there is augmentation
    assert dataclasses.replace(trial, augment_pad_px=2).trial_hash == trial.trial_hash
    crop = dataclasses.replace(trial, augment="crop")
    assert dataclasses.replace(crop, augment_pad_px=2).trial_hash != crop.trial_hash


@pytest.mark.parametrize("variants, words", [
    ({"a": {"epochs": 3}}, ["variants.a", "'epochs'", "cannot vary", "optimizer"]),
    ({"a": {"optimizer": "lion"}}, ["variants.a", "optimizer", "'lion'"]),
    ({"a": {"learning_rate": "big"}}, ["variants.a", "learning_rate", "'big'"]),
    ({"a": {"augment": "rotate"}}, ["variants.a", "augment", "'rotate'", "crop_flip"]),
    ({"a": {"accumulate_steps": 0}}, ["variants.a", "accumulate_steps", "0"]),
    ({"a": {"adapters": {"pytorch": {"python": "/usr/bin/python3"}}}}, ["variants.a", "python", "cannot vary"]),
    ({"a": 3}, ["variants.a", "table"]),
    ({}, ["variants", "[variants.adam]"]),
    ({"a b": {}}, ["variants.a b", "name"]),
])
def test_bad_variants_are_refused_with_file_key_and_value(variants, words):
    with pytest.raises(ConfigError) as e:
        parse(variants=variants)
    assert "exp.toml" in str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_variant_keys_are_experiment_fields():
    from harness.config.experiment import Experiment

    names = {f for f in Experiment.__dataclass_fields__}
    assert set(VARIANT_KEYS) <= names


def test_augmentation_the_data_cannot_take_is_refused_before_anything_runs(tiny_data):
    # tiny_data is 1x8x8: a 4-pixel pad would leave nothing of the image
    with pytest.raises(ConfigError, match="augment_pad_px = 4"):
        plan(parse(augment="crop", synthetic_shape=[1, 8, 8]), tiny_data)
    assert plan(parse(augment="crop", augment_pad_px=2, synthetic_shape=[1, 8, 8]), tiny_data)


def test_accumulation_is_refused_for_an_adapter_without_it(tiny_data, monkeypatch):
    from tests.fakes.registry import register_fake

    register_fake(monkeypatch)  # the fake adapter implements no accumulation, like a plugin that predates it
    with pytest.raises(ConfigError, match="fake adapter does not implement gradient accumulation"):
        plan(parse(frameworks=["fake"], accumulate_steps=2, synthetic_shape=[1, 8, 8]), tiny_data)
    assert plan(parse(frameworks=["fake"], synthetic_shape=[1, 8, 8]), tiny_data)


def test_summary_rows_are_per_variant():
    rows = [{"framework": "pytorch", "variant": v, "batch_size": 4, "status": "ok", "step_samples_per_s": s,
             "step_time_ms_median": 1.0, "framework_peak_mib": None, "rss_peak_mib": 1.0, "gpu_util_pct": None,
             "accuracy": a} for v, s, a in (("sgd", 10.0, 0.5), ("adam", 20.0, 0.7), ("adam", 30.0, 0.9))]
    out = summarise(rows)  # the one cell statistic (harness.cells): mean ± sd over the variant's repeats
    assert [(r["framework"], r["n"]) for r in out] == [("pytorch [adam]", 2), ("pytorch [sgd]", 1)]
    assert out[0]["step_samples_per_s"].startswith("25") and out[1]["step_samples_per_s"].startswith("10")


def test_an_override_a_variant_would_not_see_is_refused():
    exp = parse(variants={"a": {"accumulate_steps": 2, "batch_sizes": [2, 8]}, "b": {}})
    with pytest.raises(ConfigError, match="--batch-sizes: variants.a in exp.toml sets batch_sizes itself"):
        exp.with_overrides(batch_sizes=(4,))
    assert exp.with_overrides(repeats=1, batch_sizes=None).repeats == 1
    plain = parse(variants={"a": {"optimizer": "adam"}})
    assert [v.batch_sizes for _, v in plain.with_overrides(batch_sizes=(4,)).resolved_variants()] == [(4,)]
