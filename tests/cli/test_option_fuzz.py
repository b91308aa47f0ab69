"""Every numeric and choice option of ``run`` and ``maxbatch`` fuzzed (issue 43), as the experiment's keys are
(tests/config/test_schema_fuzz.py): each command line is either accepted, getting as far as its first worker (a stub
plans there and stops: no worker, no framework), or refused with exit 2, a message naming an option the user typed,
no traceback and nothing written. ``--executor ray`` and ``--ray-address`` are left out: they start a cluster."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from harness.config.choices import DATA_LAYOUTS, DEVICES, MATH_MODES, OPTIMIZERS, PRECISIONS
from harness.envs.runtime import unchecked_runtime
from tests.helpers.fuzzing import (
    EDGE_FLOATS,
    EDGE_INTS,
    Planned,
    call,
    fuzz_settings,
    refusal_problem,
    reuse_parser,
    texts,
)
from tests.helpers.planning import prepared

_COUNTER = itertools.count()

#: what a user might type for a number: whole numbers, decimals, exponents, non-finite words, junk
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str), st.sampled_from([str(i) for i in EDGE_INTS]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from([repr(f) for f in EDGE_FLOATS] + ["1e400", "-1e400", "Infinity", "NaN", "0x10", "1_000", " 8",
                                                      "8 ", "", "1,2", "3,32,32", "0,0,0"]),
    texts)


def _choice(options: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(options) | texts


RUN_OPTIONS: dict[str, st.SearchStrategy[str]] = {
    "--frameworks": st.sampled_from(["pytorch", "pytorch,tensorflow", "caffe", "", ",", "pytorch,pytorch"]) | texts,
    "--batch-sizes": st.lists(numbers, min_size=1, max_size=3).map(",".join),
    "--device": _choice(DEVICES), "--math-mode": _choice(MATH_MODES), "--repeats": numbers, "--epochs": numbers,
    "--executor": st.just("local") | texts, "--max-concurrent": numbers, "--trials-per-node": numbers,
}
MAXBATCH_OPTIONS: dict[str, st.SearchStrategy[str]] = {
    "--precision": _choice(PRECISIONS), "--math-mode": _choice(MATH_MODES), "--device": _choice(DEVICES),
    "--strategy": _choice(("model", "double-bisect")), "--optimizer": _choice(OPTIMIZERS),
    "--data-layout": _choice(DATA_LAYOUTS),
    "--granularity": st.sampled_from(["exact", "0%", "1%", "8", "8,1%", "8,16", "1%,2%", "", "51%"]) | texts,
    "--synthetic-shape": st.sampled_from(["3,32,32", "1,8,8", "3x16x16", "0,32,32", "3,32", "-1,2,2"]) | texts,
    **{flag: numbers for flag in ("--accumulate-steps", "--memory-limit-mib", "--margin-mib", "--momentum",
                                  "--threads", "--timeout-s", "--max-batch-cap", "--verify-steps", "--settle-steps")},
}


def _options(table: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[tuple[str, str]]]:
    """One to three options of ``table``, each with a value."""
    return st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=3, unique=True).flatmap(
        lambda flags: st.tuples(*(st.tuples(st.just(f), table[f]) for f in flags)).map(list))


def _argv(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{flag}={value}" for flag, value in pairs]  # "=": a value starting with "-" is still the option's


class _Plans(list):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        return f"<{len(self)} plan(s)>"


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``run`` and ``maxbatch`` up to their first worker: there the sweep is planned, or each search's settings made,
    and :class:`Planned` raised; no environment is built and no data set prepared on disk (a made-up one)."""
    import harness.pipeline
    from harness.envs import runtime
    from harness.maxbatch import searching
    from harness.monitor import environment
    from harness.run.planner import plan

    plans = _Plans()

    def plan_only(exp: Any, out_dir: Path, options: Any = None, listener: Any = None) -> None:
        plans.append(plan(exp, prepared(n_train=exp.train_samples or exp.synthetic_samples)))
        raise Planned

    def searches_only(planned: Any, out: Path, listener: Any, command: str, args: Any) -> None:
        plans.append([search.settings for search in planned.searches])
        raise Planned

    def runtimes_only(frameworks: Any, named: Any, gpu_present: bool, say: Any, registered: Any = None) -> Any:
        return {fw: unchecked_runtime(fw) for fw in frameworks}

    monkeypatch.setattr(harness.pipeline, "run_experiment", plan_only)
    reuse_parser(monkeypatch)
    monkeypatch.setattr(searching.MaxBatchPlan, "run_in", searches_only)
    # the framework as the command would resolve it, without building or checking its environment
    monkeypatch.setattr(runtime, "command_runtimes", runtimes_only)
    monkeypatch.setattr(environment, "capture", lambda: {"gpus": [], "python": "3"})
    monkeypatch.setattr(searching, "prepare", lambda request, cache: prepared(shape=request.synthetic_shape))
    return plans


def _refused_properly(ran: Any, pairs: list[tuple[str, str]], out: Path, base_flags: list[str]) -> None:
    problem = refusal_problem(ran, [f for f, _ in pairs] + base_flags, out)
    assert problem is None, (problem, pairs, ran.stderr[-2000:], ran.stdout[-500:])


@fuzz_settings()
@given(pairs=_options(RUN_OPTIONS))
def test_run_options_are_planned_or_refused_naming_them(tmp_path, stubs, pairs):
    n = next(_COUNTER)
    exp, out = tmp_path / f"exp{n}.toml", tmp_path / f"out{n}"
    exp.write_text('name = "fuzz"\nframeworks = ["pytorch"]\nbatch_sizes = [4, 8]\n')
    ran = call(["run", str(exp), "--out", str(out), "--quiet", *_argv(pairs)], stubs)
    event("refused" if ran.planned is None else "planned")
    if ran.planned is None:
        _refused_properly(ran, pairs, out, [])
    else:
        assert ran.planned and all(math.isfinite(t.optimizer.lr) for t in ran.planned), pairs


@fuzz_settings()
@given(pairs=_options(MAXBATCH_OPTIONS), verify=st.booleans())
def test_maxbatch_options_are_planned_or_refused_naming_them(tmp_path, stubs, pairs, verify):
    out = tmp_path / f"out{next(_COUNTER)}"
    base = ["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--memory-limit-mib", "600", "--quiet",
            "--out", str(out), *(["--verify"] if verify else [])]
    ran = call([*base, *_argv(pairs)], stubs)
    event("refused" if ran.planned is None else "planned")
    if ran.planned is None:
        _refused_properly(ran, pairs, out, ["--framework", "--model", "--memory-limit-mib", "--verify"])
    else:
        for settings in ran.planned:  # what the search runs with: finite, on its grid
            assert settings.max_batch_cap >= 1 and settings.resolution.snap(settings.max_batch_cap) == \
                settings.max_batch_cap, (pairs, settings)
            assert settings.budget_mib is not None and math.isfinite(settings.budget_mib), (pairs, settings)
