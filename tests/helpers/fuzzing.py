"""What the property-based tests of the experiment schema and the command line share (issue 43): TOML values of every
type, a TOML writer for them, the Hypothesis settings (bounded examples, no example database) and ``batchscope`` run
in-process with the part that would start a worker replaced by one that only plans.

The settings: ``deadline=None`` (a slow machine is no failure), ``database=None`` (no ``.hypothesis/`` directory, in
CI or anywhere: every run draws afresh from its seed), and a number of examples per test that keeps all of them
well under 20 s together (docs/reliability.md says how many run).
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
import math
import os
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: examples per property test, and per key where each key of the schema is fuzzed alone; ``BATCHSCOPE_FUZZ_EXAMPLES``
#: scales both for a longer local run (e.g. 1000)
EXAMPLES = int(os.environ.get("BATCHSCOPE_FUZZ_EXAMPLES", "60"))
KEY_EXAMPLES = max(1, EXAMPLES // 6)


def fuzz_settings(examples: int = EXAMPLES) -> settings:
    """Bounded, reproducible from the run's seed, no example database (the module's docstring)."""
    return settings(max_examples=examples, deadline=None, database=None, derandomize="CI" in os.environ,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


# ------------------------------------------------------------------ TOML values
#: numbers that sit on the edges: 0, signs, SQLite's and a batch's largest, float's extremes and non-finite ones
EDGE_INTS = (0, 1, -1, 2, 3, 7, 8, 100, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63))
EDGE_FLOATS = (0.0, -0.0, 0.5, 1.0, 1.5, 100.0, 1e-320, 5e-324, 1e-300, 1e300, 1.7976931348623157e308, -1.0, -1e300,
               math.inf, -math.inf, math.nan)
_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters=":")  # ":" would name a user's module

ints = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from(EDGE_INTS))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EDGE_FLOATS))
texts = st.one_of(st.text(alphabet=_TEXT, max_size=12), st.sampled_from(["", " ", "0", "1%", "exact", "8,16", "1%,2%",
                                                                          "inf", "nan", "-1", "npz:/no/such.npz"]))
scalars = st.one_of(ints, floats, st.booleans(), texts, st.dates(min_value=dt.date(1, 1, 1)))
#: any TOML value: scalars, arrays of them (mixed types, as TOML 1.0 allows) and nested tables
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.one_of(st.sampled_from(["pytorch", "tensorflow", "python", "memory_mode", "learning_rate", "a"]),
              st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)), inner, max_size=3),
    max_leaves=8)


def toml_value(value: Any) -> str:
    """``value`` written as TOML (inline tables for nested ones)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)  # inf, -inf, 1e+300, 5e-324 are TOML as repr writes them
    if isinstance(value, str):  # a basic string; DEL is a control character TOML wants escaped, JSON does not
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a TOML value: {value!r}")


def toml_document(data: dict[str, Any]) -> str:
    """A flat TOML file of ``data`` (every key quoted, tables inline)."""
    return "".join(f"{toml_value(k)} = {toml_value(v)}\n" for k, v in data.items())


# ------------------------------------------------------------------ running batchscope in-process
class Planned(BaseException):  # a signal, not an error, and one main does not catch
    """Raised where the command would start its first worker: everything before it accepted the input."""


@dataclass(frozen=True)
class Ran:
    """One in-process ``batchscope`` call: its exit code, what it printed, and what it planned (None: refused)."""

    code: int
    stdout: str
    stderr: str
    planned: Any = None


def reuse_parser(monkeypatch: Any) -> None:
    """One ``batchscope`` parser for every call of a test (building it is most of an in-process call's time; parsing
    does not change it)."""
    import harness.cli

    monkeypatch.setattr(harness.cli, "build_parser", functools.cache(harness.cli.build_parser))


def call(argv: Sequence[str], planned: list[Any]) -> Ran:
    """``batchscope ARGV`` in-process (stdout and stderr captured). A stub installed by the caller raises
    :class:`Planned` where the first worker would start, after appending what it planned to ``planned``: the call
    then ends with exit code 0 and the plan."""
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(argv))
    except Planned:
        return Ran(0, out.getvalue(), err.getvalue(), planned[-1])
    except SystemExit as e:  # argparse: exit 2 with its usage line
        code = int(e.code) if isinstance(e.code, int) else 2
    return Ran(code, out.getvalue(), err.getvalue())


def refusal_problem(ran: Ran, names: Sequence[str], out: Path) -> str | None:
    """Why ``ran`` is not a proper refusal (None: it is): exit 2, no traceback, an error line naming one of
    ``names`` (a key or flag the user wrote), and nothing under ``out``."""
    text = ran.stderr + ran.stdout
    if ran.code != 2:
        return f"exit {ran.code}, not 2"
    if "Traceback" in text:
        return "a traceback reached the user"
    if not any(name in text for name in names):
        return f"the message names none of {list(names)}"
    if out.exists():
        return f"{out} was written"
    return None
