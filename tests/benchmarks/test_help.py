"""Every benchmark's ``--help`` prints its usage: the first thing a reader of docs/benchmarks.md runs.

``maxbatch_sim.py --help`` raised a TypeError (its help text had a bare ``%`` that argparse reads as a format
directive); argparse formats help only when asked, so nothing else showed it.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                 if p.stem != "__init__" and "def main(" in p.read_text())


def test_every_benchmark_script_is_found() -> None:
    assert {"maxbatch_sim", "harness_overhead", "maxbatch_strategies"} <= set(SCRIPTS), SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_the_usage(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the scripts import their neighbours as run
    module = importlib.import_module(f"benchmarks.{name}")
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    try:
        code = module.main(["--help"]) if inspect.signature(module.main).parameters else module.main()
    except SystemExit as e:  # argparse's --help
        code = e.code
    assert code == 0
    printed = capsys.readouterr()
    # argparse's usage, or (throughput_table, no argparse) the command line that its docstring gives
    assert "usage:" in printed.out or f"benchmarks/{name}.py" in printed.err, printed
