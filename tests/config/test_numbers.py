"""Numbers as TOML writes them (issue 43): an integer wherever a float is expected, converted once where the file is
read, so each value meets its own check; a rate derived from several keys is checked like them and refused naming
the keys that made it."""

from __future__ import annotations

import re

import pytest

from harness.config.experiment import load_experiment, parse_experiment
from harness.errors import ConfigError
from harness.run.planner import plan
from tests import ROOT
from tests.helpers.planning import prepared

BASE = {"name": "t", "frameworks": ["pytorch"], "batch_sizes": [4, 8]}


def parse(**changes):
    return parse_experiment({**BASE, **changes}, source="exp.toml")


def test_the_documented_factor_grid_is_read_from_the_docs_and_plans(tmp_path):
    text = (ROOT / "docs" / "critical_batch.md").read_text()
    (grid,) = set(re.findall(r"lr_factors = \[[^\]]*\]", text)) & {"lr_factors = [0.5, 1, 2]"}
    path = tmp_path / "grid.toml"
    path.write_text(f'name = "grid"\nframeworks = ["pytorch"]\nbatch_sizes = [8, 32]\nlr_policy = "linear"\n{grid}\n')
    exp = load_experiment(path)
    assert exp.lr_factors == (0.5, 1.0, 2.0) and all(type(f) is float for f in exp.lr_factors)
    trials = plan(exp, prepared())
    assert sorted({t.variant for t in trials}) == ["lr_x0.5", "lr_x1.0", "lr_x2.0"]
    assert {(t.variant, t.batch_size): t.optimizer.lr for t in trials}[("lr_x2.0", 32)] == pytest.approx(0.01 * 2)


def test_an_integer_is_a_rate_in_a_grid_and_a_scalar():
    assert parse(learning_rates=[0.01, 1]).learning_rates == (0.01, 1.0)
    assert parse(learning_rate=1).learning_rate == 1.0
    exp = parse(variants={"a": {"learning_rate": 1}, "b": {"momentum": 0}})
    assert [v.settings for v in exp.variants] == [{"learning_rate": 1.0}, {"momentum": 0.0}]


@pytest.mark.parametrize("key", ["lr_factors", "learning_rates"])
def test_a_zero_in_a_grid_meets_the_grids_own_message(key):
    with pytest.raises(ConfigError, match=rf"exp.toml: {key}: \[0.0\]: every value must be a finite number > 0"):
        parse(**{key: [0]})


def test_a_whole_number_key_still_refuses_a_float():
    with pytest.raises(ConfigError, match="batch_sizes: 4.0 should be a whole number"):
        parse(batch_sizes=[4.0])


@pytest.mark.parametrize("changes, key, words", [
    ({"learning_rate": 1e300, "lr_factors": [1e10]}, "lr_factors",
     ["learning_rate 1e+300 x lr_factors value 10000000000.0", "gives a rate of inf"]),
    ({"learning_rate": 1e300, "lr_factors": [1e8], "lr_policy": "linear", "lr_base_batch": 1}, "lr_factors",
     ["lr_policy = 'linear'", "lr_base_batch 1", "to batch 4", "rate of inf"]),
    ({"learning_rates": [1e308], "lr_policy": "linear", "lr_base_batch": 1}, "learning_rates",
     ["learning_rates value 1e+308", "rate of inf"]),
    ({"learning_rate": 1e300, "lr_policy": "linear", "lr_base_batch": 1, "batch_sizes": [2**31 - 1]},
     "learning_rate", ["rate of inf"]),
    ({"learning_rate": 1e-320, "lr_policy": "sqrt", "lr_base_batch": 2**31 - 1, "batch_sizes": [1]},
     "learning_rate", ["rate of 0.0"]),
])
def test_a_derived_rate_is_refused_naming_the_keys_that_made_it(changes, key, words):
    with pytest.raises(ConfigError) as e:
        parse(**changes)
    msg = str(e.value)
    assert msg.startswith(f"exp.toml: {key}: ") and "must be a finite number > 0" in msg, msg
    assert all(w in msg for w in words), msg
    assert "learning_rate: inf" not in msg  # never a value the user did not write, without its keys
