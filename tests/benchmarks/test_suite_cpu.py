"""benchmarks/suite_cpu.py: the per-test CPU records of the test suite, summed by kind, module and test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suite_cpu import summarise

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.process
def test_the_plugin_records_each_test_and_the_summary_sums_them(tmp_path: Path) -> None:
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_two.py").write_text(
        "import subprocess, sys\nimport pytest\n\n"
        "@pytest.mark.slow\ndef test_spends_cpu_in_a_child():\n"
        "    subprocess.run([sys.executable, '-c', 'sum(range(3_000_000))'], check=True)\n\n"
        "def test_quick():\n    pass\n")
    (tests / "conftest.py").write_text(
        "def pytest_configure(config):\n    config.addinivalue_line('markers', 'slow: starts a framework')\n")
    out = tmp_path / "records"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.suite_cpu", "-p", "no:cacheprovider",
                           "--rootdir", str(tests), str(tests)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "BATCHSCOPE_SUITE_CPU": str(out)})
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["test"].split("::")[1]: r for r in json.loads((out / "main.json").read_text())}
    assert set(rows) == {"test_spends_cpu_in_a_child", "test_quick"}
    child, quick = rows["test_spends_cpu_in_a_child"], rows["test_quick"]
    assert (child["kind"], quick["kind"]) == ("slow", "fast")
    assert child["children_cpu_s"] > 0.01 and quick["children_cpu_s"] == 0.0  # the child's CPU, once it was reaped
    text = summarise(out, top=5)
    assert text.startswith("2 tests: ") and "  slow      1 tests" in text and "  fast      1 tests" in text
    assert text.index("test_spends_cpu_in_a_child") < text.index("test_quick")  # the costlier first


def test_no_records_says_so(tmp_path: Path) -> None:
    assert summarise(tmp_path, top=5) == f"no records in {tmp_path}"
