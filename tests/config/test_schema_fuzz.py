"""The experiment schema fuzzed (issue 43), so that a class of defect found by hand cannot come back: for every key
of the schema (read from :class:`~harness.config.experiment.Experiment`, not restated), values of every TOML type,
alone and in combinations that multiply (rates x factors x batch), written as a file and given to ``batchscope run``
in-process. Each file is either

* accepted, and plans a sweep (where the first worker would start, a stub plans the trials and stops): every numeric
  value it set lies within bounds its field declares (a key with none is a key nothing checks), every trial's rate
  is a finite number > 0, and the resolved experiment is strict JSON; or
* refused: exit 2, a message naming a key the user wrote, no traceback, nothing written.

No worker, no framework: in ``make test`` and ``make test-fast`` alike. Examples: tests/helpers/fuzzing.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from harness.config.experiment import _CHOICES, _LISTS, _SCALARS, VALID_KEYS, VARIANT_KEYS, Experiment
from harness.data.known import DATASETS
from harness.models.catalogue import CATALOGUE
from tests.helpers.fuzzing import (
    KEY_EXAMPLES,
    Planned,
    Ran,
    call,
    floats,
    fuzz_settings,
    ints,
    refusal_problem,
    reuse_parser,
    texts,
    toml_document,
    values,
)
from tests.helpers.planning import prepared

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BASE = {"name": "fuzz", "frameworks": ["pytorch"], "batch_sizes": [4, 8]}
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
_COUNTER = itertools.count()


def _near(key: str) -> st.SearchStrategy[Any]:
    """Values a user might write for ``key``: of its own type and values, at the edges."""
    if key in _CHOICES:
        return st.sampled_from(_CHOICES[key]) | texts
    if key == "frameworks":
        return st.lists(st.sampled_from(FRAMEWORKS) | texts, max_size=3)
    if key == "model":
        return st.sampled_from(sorted(CATALOGUE)) | texts
    if key == "dataset":
        return st.sampled_from(sorted(DATASETS)) | texts
    if key == "max_batch_granularity":
        return st.sampled_from(["", "exact", "0%", "1%", "8", "8,1%", "8,16", "1%,2%", "50%", "51%"]) | texts
    if key == "variants":
        return st.dictionaries(st.sampled_from(["a", "b", "x-y"]) | texts,
                               st.dictionaries(st.sampled_from(VARIANT_KEYS), values, max_size=2), max_size=2)
    if key in ("adapters", "environments"):
        return st.dictionaries(st.sampled_from(FRAMEWORKS) | texts, values, max_size=2)
    if key not in _SCALARS and key not in _LISTS:  # a key the schema does not have
        return values
    if key in _LISTS:
        item = floats | ints if _LISTS[key] is float else ints
        return st.lists(item, max_size=4)
    kinds = _SCALARS[key]
    if kinds == (int, float):
        return floats | ints
    if kinds is int:
        return ints
    return texts if kinds is str else st.booleans()


def _value(key: str) -> st.SearchStrategy[Any]:
    return st.one_of(_near(key), _near(key), values)  # mostly its own kind, else any TOML value at all


#: files of the base plus one to three keys of the schema (or an unknown one) set to anything
changes = st.lists(st.sampled_from([*VALID_KEYS, "batchsize", "lr"]), min_size=1, max_size=3, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({k: _value(k) for k in keys}))

#: the keys that multiply into a trial's rate: learning_rate x factor (or a grid's rate), scaled by lr_policy from
#: lr_base_batch to each batch x accumulate_steps, each at its edges
positive = st.one_of(st.sampled_from([1e-320, 5e-324, 1e-300, 1e-8, 0.01, 0.5, 1, 2, 1e8, 1e10, 1e300, 2**31 - 1,
                                      1.7976931348623157e308]),
                     st.floats(min_value=1e-300, max_value=1e300),
                     st.sampled_from([0, -1, math.inf, math.nan]) | floats)
rates = st.fixed_dictionaries({
    "lr_policy": st.sampled_from(["fixed", "linear", "sqrt"]),
    "lr_base_batch": st.sampled_from([1, 2, 32, 2**31 - 1, 0]) | ints,
    "batch_sizes": st.lists(st.sampled_from([1, 4, 32, 1024, 2**31 - 1]), min_size=1, max_size=3, unique=True) |
    st.lists(ints, min_size=1, max_size=3),
    "accumulate_steps": st.sampled_from([1, 2, 1024, 1025]),
}, optional={"learning_rate": positive, "lr_factors": st.lists(positive, min_size=1, max_size=3),
             "learning_rates": st.lists(positive, max_size=3)})


@pytest.fixture
def planning(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``batchscope run`` up to where its first worker would start: there the sweep is planned (and, with
    ``max_batch = true``, each search's request made) and :class:`Planned` raised. Returns the plans."""
    import harness.pipeline
    from harness.maxbatch.request import MaxBatchRequest
    from harness.run.planner import plan

    plans = _Plans()

    def plan_only(exp: Experiment, out_dir: Path, options: Any = None, listener: Any = None) -> None:
        trials = plan(exp, prepared(n_train=exp.train_samples or exp.synthetic_samples))
        if exp.max_batch:
            for framework in exp.frameworks:
                MaxBatchRequest.from_experiment(exp, framework)
        plans.append((exp, trials))
        raise Planned

    monkeypatch.setattr(harness.pipeline, "run_experiment", plan_only)
    reuse_parser(monkeypatch)
    return plans


class _Plans(list):  # type: ignore[type-arg]
    """The plans made so far (a short repr: Hypothesis prints the test's arguments with a failing example)."""

    def __repr__(self) -> str:
        return f"<{len(self)} plan(s)>"


def _written_keys(data: dict[str, Any]) -> list[str]:
    """The keys the user wrote, as a message may name them (a table's own keys too: ``variants.a``, ``adapters.x``)."""
    names = list(data)
    for key in ("variants", "adapters", "environments"):
        if isinstance(data.get(key), dict):
            for name, table in data[key].items():
                names.append(f"{key}.{name}")
                if isinstance(table, dict):
                    names.extend(str(k) for k in table)
    return names


def _numbers_problem(exp: Experiment, data: dict[str, Any]) -> str | None:
    """Why an accepted experiment's numbers are not all checked (None: they are): each numeric key the user set lies
    within bounds its field declares (a field that declares none accepts any number: nothing checks it), and a list
    of numbers holds finite numbers > 0 (every such list of the schema is sizes, shapes or rates)."""
    hints = typing.get_type_hints(Experiment)
    fields = {f.name: f for f in dataclasses.fields(Experiment)}
    for key in data:
        if key not in fields:
            continue
        value, hint, meta = getattr(exp, key), hints[key], fields[key].metadata
        if typing.get_origin(hint) is tuple:
            numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if any(not (math.isfinite(v) and v > 0) for v in numbers):
                return f"{key} accepted {list(value)!r}: a list of numbers must hold finite numbers > 0"
            continue
        if hint not in (int, float):
            continue
        low = meta.get("ge") if meta.get("ge") is not None else meta.get("gt")
        high = meta.get("le") if meta.get("le") is not None else meta.get("lt")
        if low is None:
            return f"{key} accepted {value!r} and declares no lower bound: nothing checks it (_setting(ge=...))"
        if not math.isfinite(value) or value < low or (meta.get("gt") is not None and value <= low):
            return f"{key} accepted {value!r} outside its declared bounds"
        if high is not None and value > high:
            return f"{key} accepted {value!r} above its declared bound {high}"
    return None


def _writes_non_finite(value: Any) -> bool:
    """Whether ``value`` holds inf or nan anywhere (a refusal may quote those only then)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_writes_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_writes_non_finite(v) for v in value)
    return False


def _check(tmp_path: Path, data: dict[str, Any], plans: list[Any]) -> Ran:
    """Write ``data``, run ``batchscope run`` on it, and assert the property (the module's docstring)."""
    n = next(_COUNTER)
    path, out = tmp_path / f"exp{n}.toml", tmp_path / f"out{n}"
    text = toml_document(data)
    assert tomllib.loads(text).keys() == data.keys()  # the writer writes TOML
    path.write_text(text, encoding="utf-8")
    ran = call(["run", str(path), "--out", str(out), "--quiet"], plans)
    event("refused" if ran.planned is None else "planned")  # --hypothesis-show-statistics shows the share
    if ran.planned is None:
        problem = refusal_problem(ran, _written_keys(data) + ["name", "frameworks", "batch_sizes"], out)
        assert problem is None, (problem, text, ran.stderr[-2000:], ran.stdout[-500:])
        assert str(path) in ran.stderr, (ran.stderr, text)  # the file is named too
        told = ran.stderr.split(str(path), 1)[-1]
        if not _writes_non_finite(data):  # never a value the user did not write (issue 43: "learning_rate: inf")
            # ... judged as if it had been: a derived one is said with the keys that made it ("gives a rate of inf")
            assert not re.search(r"(?<!['\w.])(inf|nan) (must|should|is)\b", told), (told, text)
        return ran
    exp, trials = ran.planned
    assert trials, text
    problem = _numbers_problem(exp, data)
    assert problem is None, (problem, text)
    for t in trials:
        assert math.isfinite(t.optimizer.lr) and t.optimizer.lr > 0, (t.optimizer.lr, t.variant, text)
    json.dumps(exp.to_dict(), allow_nan=False)  # the resolved experiment is stored as JSON: strict
    return ran


@pytest.mark.parametrize("key", [*VALID_KEYS, "batchsize"])  # every key of the schema, a new one included
@fuzz_settings(KEY_EXAMPLES)
@given(data=st.data())
def test_every_key_alone_with_any_toml_value_is_planned_or_refused_naming_it(tmp_path, planning, key, data):
    _check(tmp_path, {**BASE, key: data.draw(_value(key), label=key)}, planning)


@fuzz_settings()
@given(change=changes)
def test_keys_together_with_any_toml_values_are_planned_or_refused_naming_them(tmp_path, planning, change):
    _check(tmp_path, {**BASE, **change}, planning)


@fuzz_settings()
@given(combo=rates)
@example(combo={"learning_rate": 1e300, "lr_factors": [1e8], "lr_policy": "linear", "lr_base_batch": 1,
                "batch_sizes": [4]})  # issue 43's cases, every run
@example(combo={"learning_rate": 1e300, "lr_factors": [1e10], "lr_policy": "fixed", "lr_base_batch": 32,
                "batch_sizes": [4]})
@example(combo={"learning_rate": 1e300, "lr_policy": "linear", "lr_base_batch": 1, "batch_sizes": [2**31 - 1],
                "accumulate_steps": 2})
def test_rates_factors_and_batches_that_multiply_are_planned_or_refused_naming_them(tmp_path, planning, combo):
    ran = _check(tmp_path, {**BASE, "frameworks": ["pytorch"], **combo}, planning)
    if ran.planned is None and "rate of" in ran.stderr:  # a derived rate: named by the keys that made it
        assert "lr_policy" in ran.stderr or "gives a rate" in ran.stderr, ran.stderr


def test_the_property_can_fail(tmp_path, planning):
    # the oracles themselves: an accepted value outside what a key declares, and a refusal that names nothing
    exp = Experiment(name="x", frameworks=("pytorch",), batch_sizes=(4,))
    assert _numbers_problem(dataclasses.replace(exp, learning_rate=1.0), {"learning_rate": 1.0}) is None
    bogus = dataclasses.replace(exp, learning_rates=(0.5,))
    object.__setattr__(bogus, "learning_rates", (-1.0,))  # as an unchecked key would leave it
    assert "finite numbers > 0" in (_numbers_problem(bogus, {"learning_rates": [-1]}) or "")
    object.__setattr__(bogus, "epochs", -5)
    assert "outside its declared bounds" in (_numbers_problem(bogus, {"epochs": -5}) or "")
    assert refusal_problem(Ran(2, "", "batchscope: error: something"), ["epochs"], tmp_path / "none") is not None
    assert refusal_problem(Ran(1, "", "epochs"), ["epochs"], tmp_path / "none") == "exit 1, not 2"
