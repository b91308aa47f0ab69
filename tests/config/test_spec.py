"""Experiment files: every refusal names the file and key and quotes the bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.experiment import VALID_KEYS, Experiment, load_experiment, parse_experiment
from harness.errors import ConfigError
from tests import ROOT

BASE = {"name": "t", "frameworks": ["pytorch"], "batch_sizes": [4, 8]}


def parse(**changes):
    return parse_experiment({**BASE, **changes}, source="exp.toml")


def test_minimal_file_gets_defaults():
    exp = parse()
    assert exp.frameworks == ("pytorch",) and exp.batch_sizes == (4, 8)
    assert exp.model == "osu_cnn" and exp.device == "auto" and exp.repeats == 1


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        parse(batchsize=[4])
    msg = str(e.value)
    assert "exp.toml" in msg and "'batchsize'" in msg and "batch_sizes" in msg
    assert all(k in msg for k in VALID_KEYS)


@pytest.mark.parametrize("changes, words", [
    ({"batch_sizes": [4, 0]}, ["batch_sizes", "0", "> 0"]),
    ({"batch_sizes": [-8]}, ["batch_sizes", "-8"]),
    ({"batch_sizes": []}, ["batch_sizes", "empty"]),
    ({"batch_sizes": [4, 4]}, ["batch_sizes", "twice"]),
    ({"batch_sizes": [4.5]}, ["batch_sizes", "4.5"]),
    ({"frameworks": []}, ["frameworks", "empty"]),
    ({"frameworks": ["caffe"]}, ["frameworks", "'caffe'", "pytorch"]),
    ({"model": "resnet9000"}, ["model", "'resnet9000'", "osu_cnn"]),
    ({"dataset": "imagenet"}, ["dataset", "'imagenet'"]),
    ({"epochs": -1}, ["epochs", "-1"]),
    ({"repeats": 0}, ["repeats", "0"]),
    ({"device": "tpu"}, ["device", "'tpu'", "auto"]),
    ({"optimizer": "lion"}, ["optimizer", "'lion'"]),
    ({"lr_policy": "cosine"}, ["lr_policy", "'cosine'"]),
    ({"learning_rate": 0}, ["learning_rate", "0"]),
    ({"epochs": "ten"}, ["epochs", "'ten'", "should be a whole number"]),
    ({"timeout_s": -5}, ["timeout_s", "-5"]),
    ({"adapters": {"caffe": {}}}, ["adapters", "'caffe'"]),
    ({"adapters": {"pytorch": {"colour": "red"}}}, ["adapters.pytorch", "'colour'"]),
    ({"adapters": {"pytorch": {"python": "/no/such/python"}}}, ["adapters.pytorch.python", "/no/such/python",
                                                                 "does not exist"]),
    ({"environments": {"pytorch": "/no/such/python"}}, ["environments.pytorch", "/no/such/python", "does not exist"]),
    ({"environments": {"caffe": "/usr/bin/python3"}}, ["environments.caffe", "unknown adapter 'caffe'"]),
    ({"environments": {"pytorch": 3}}, ["environments.pytorch", "3", "should be the path of an interpreter"]),
])
def test_bad_values_are_refused_with_the_value_quoted(changes, words):
    with pytest.raises(ConfigError) as e:
        parse(**changes)
    msg = str(e.value)
    assert "exp.toml" in msg
    for w in words:
        assert w in msg, (w, msg)


def test_missing_required_key():
    with pytest.raises(ConfigError, match="missing required key 'batch_sizes'"):
        parse_experiment({"name": "t", "frameworks": ["pytorch"]}, source="x.toml")


def test_file_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such experiment file"):
        load_experiment(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(bad)


def test_every_shipped_experiment_is_valid():
    files = sorted(ROOT.joinpath("experiments").glob("*.toml"))
    assert files
    for f in files:
        assert isinstance(load_experiment(f), Experiment)


def test_lr_policies():
    assert parse(learning_rate=0.1, lr_policy="linear", lr_base_batch=32).lr_for(64) == pytest.approx(0.2)
    assert parse(learning_rate=0.1, lr_policy="sqrt", lr_base_batch=32).lr_for(128) == pytest.approx(0.2)
    assert parse(learning_rate=0.1).lr_for(1024) == 0.1


def test_overrides_are_validated():
    with pytest.raises(ConfigError, match="batch size 0"):
        parse().with_overrides(batch_sizes=(0,))
    assert parse().with_overrides(batch_sizes=(16,), device=None).batch_sizes == (16,)


def test_trial_hash_is_stable_and_ignores_timeout():
    from tests.conftest import make_trial

    a, b = make_trial(timeout_s=10), make_trial(timeout_s=99)
    assert a.trial_hash == b.trial_hash
    assert make_trial(batch_size=8).trial_hash != a.trial_hash
    from harness.config.trial import TrialSpec

    assert TrialSpec.from_dict(a.to_dict()) == a


@pytest.mark.parametrize(("framework", "device"), [("pytorch", "cpu"), ("tensorflow", "cpu"), ("mxnet", "auto"),
                                                    ("mxnet", "gpu")])
def test_amp_is_refused_in_the_parent_where_the_adapter_does_not_run_it(framework, device):
    # a stored row must never claim a precision that did not run: refused before anything is written
    with pytest.raises(ConfigError) as e:
        parse(frameworks=[framework], precision="amp", device=device)
    msg = str(e.value)
    assert "exp.toml: precision" in msg and f"'amp' is not run by the {framework} adapter" in msg
    assert "set precision = 'fp32'" in msg


def test_denormals_key_defaults_to_flush_reaches_the_trial_and_is_validated():
    from harness.run.planner import plan

    assert parse().denormals == "flush"
    assert parse(denormals="framework-default").denormals == "framework-default"
    with pytest.raises(ConfigError, match=r"denormals: 'ftz' is not one of flush, framework-default"):
        parse(denormals="ftz")

    class _Data:
        key = "k"
        input_shape = (1, 8, 8)  # the planner checks a variant's augmentation against it
        n_train = 1000  # the planner caps what a trial asks of its steps by them

    trials = plan(parse(denormals="framework-default"), _Data())  # type: ignore[arg-type]
    assert {t.denormals for t in trials} == {"framework-default"}
    assert trials[0].trial_hash != plan(parse(), _Data())[0].trial_hash  # type: ignore[arg-type]


def test_amp_is_refused_for_a_max_batch_search_too():
    """Where the search is built (``MaxBatchSearch.build`` checks its request against the runtime's adapter), before
    its data is prepared: the same words as the command line's."""
    from harness.maxbatch.request import MaxBatchRequest
    from harness.maxbatch.searching import MaxBatchSearch

    req = MaxBatchRequest(framework="pytorch", model="deep_cnn", precision="amp", device="cpu", memory_limit_mib=600)
    with pytest.raises(ConfigError, match=r"--precision 'amp': 'amp' is not run by the pytorch adapter on the CPU"
                                          r".*use --precision 'fp32' or 'bf16', or --device 'gpu'"):
        MaxBatchSearch.build(req, {"gpus": []}, data=object())  # type: ignore[arg-type]


def test_the_schema_is_derived_from_the_fields():
    """A key exists, takes its TOML type and is bounded because the Experiment field says so (issue 25, item 5):
    adding a field with `_setting(...)` bounds is the whole change, the parser and its messages follow."""
    import dataclasses
    import typing

    from harness.config import experiment as ex

    fields = {f.name for f in dataclasses.fields(Experiment)} - {"source"}
    assert set(VALID_KEYS) == fields | {"environments"}  # [environments] fills the adapters' interpreters
    assert ex._SCALARS["learning_rate"] == (int, float) and ex._SCALARS["device"] is str
    assert ex._LISTS == {"frameworks": str, "batch_sizes": int, "synthetic_shape": int, "learning_rates": float,
                         "lr_factors": float}
    # every Literal field is checked against its own values, named in the message
    for key, choices in ex._CHOICES.items():
        assert choices == typing.get_args(typing.get_type_hints(Experiment)[key])
        with pytest.raises(ConfigError, match=rf"exp.toml: {key}: 'bogus' is not one of {', '.join(choices)}"):
            parse(**{key: "bogus"})
    # every bound a field declares is enforced with the field's own message
    bounded = [f for f in dataclasses.fields(Experiment) if f.metadata]
    assert {f.name for f in bounded} >= {"epochs", "repeats", "learning_rate", "momentum", "memory_limit_mib"}
    for f in bounded:
        m = f.metadata
        low = m["gt"] if m["gt"] is not None else m["ge"] - 1
        with pytest.raises(ConfigError, match=rf"exp.toml: {f.name}: "):
            parse(**{f.name: low})


def test_a_float_setting_must_be_finite():
    with pytest.raises(ConfigError, match="momentum: nan must be a finite number"):
        parse(momentum=float("nan"))
    with pytest.raises(ConfigError, match=r"momentum: 1.0 must be in \[0, 1\)"):
        parse(momentum=1.0)


def test_eval_points_default_to_eight_reach_the_trial_and_change_its_hash_only_when_set():
    from harness.run.planner import plan

    class _Data:
        key = "k"
        input_shape = (1, 8, 8)
        n_train = 1000  # the planner caps what a trial asks of its steps by them

    assert parse().eval_points == 8
    assert {t.eval_points for t in plan(parse(eval_points=3), _Data())} == {3}  # type: ignore[arg-type]
    # eval = false evaluates nothing, so its trials carry no evaluation points (and keep their old hashes)
    assert {t.eval_points for t in plan(parse(eval=False), _Data())} == {0}  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"exp.toml: eval_points: -1 must be >= 0"):
        parse(eval_points=-1)
    with pytest.raises(ConfigError, match=r"eval_points: 4 evaluation points were asked for, but eval = false"):
        parse(eval=False, eval_points=4)
    from tests.conftest import make_trial

    # a trial from before the key existed (eval_points 0) keeps its hash: --resume on an old store skips it
    old = make_trial()
    assert old.eval_points == 0
    assert make_trial(eval_points=0).trial_hash == old.trial_hash
    assert make_trial(eval_points=8).trial_hash != old.trial_hash


def test_target_accuracy_is_a_percent_defaulting_to_zero_and_refuses_a_fraction():
    assert parse().target_accuracy == 0.0 and parse(target_accuracy=97.5).target_accuracy == 97.5
    for bad, words in ((0.95, ["target_accuracy", "percent", "write 95"]), (101, ["target_accuracy", "101"]),
                       (-1, ["target_accuracy", "-1"])):
        with pytest.raises(ConfigError) as e:
            parse(target_accuracy=bad)
        assert all(w in str(e.value) for w in words), (bad, str(e.value))


def test_target_accuracy_is_an_analysis_key_resume_accepts_and_no_trial_hash_holds():
    from harness.run.sweep import changed_settings

    before, after = parse(), parse(target_accuracy=90.0)
    assert changed_settings(before.to_dict(), after.to_dict()) == []  # --resume keeps the finished trials
    assert changed_settings(before.to_dict(), parse(epochs=3).to_dict())  # a setting of how trials run still counts
    from dataclasses import fields

    from harness.config.trial import TrialSpec

    assert "target_accuracy" not in {f.name for f in fields(TrialSpec)}  # so no trial's hash depends on it


@pytest.mark.parametrize(("text", "gpu", "cpu"),
                         [("", "8,1%", "1%"), ("exact", "exact", "exact"), ("16,2%", "16,2%", "16,2%")])
def test_max_batch_granularity_sets_the_sweeps_search_resolution(text, gpu, cpu):
    from harness.maxbatch.request import MaxBatchRequest

    exp = parse(max_batch=True, max_batch_granularity=text)
    req = MaxBatchRequest.from_experiment(exp, "pytorch")
    assert (req.resolution("gpu").label, req.resolution("cpu").label) == (gpu, cpu)


@pytest.mark.parametrize("text, why", [("3%x", "is not 'exact', N%"), ("0", "is not 'exact', N%"),
                                       ("60%", "is not 'exact', N%"), ("8,1%,2", "gives two steps"),
                                       ("1%,2%", "gives two tolerances")])
def test_a_resolution_the_search_cannot_use_is_refused_naming_the_key(text, why):
    with pytest.raises(ConfigError, match=rf"exp.toml: max_batch_granularity: '{text}' {why}"):
        parse(max_batch=True, max_batch_granularity=text)
