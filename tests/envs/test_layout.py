"""Issue 38, item 1 and issue 51 item 5: one package per framework with the same module name for the same role (the
table in docs/adapters.md), and the parent environment holding no framework."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from harness.registry import adapter_class, adapter_target
from tests import ROOT

BUILTINS = ("pytorch", "tensorflow", "jax", "mxnet")


def _layout_table() -> dict[str, dict[str, bool]]:
    """docs/adapters.md's "Package layout" table: module -> {framework: has the module}."""
    text = (ROOT / "docs" / "adapters.md").read_text()
    rows = text.split("## Package layout", 1)[1].split("\n\n| module |", 1)[1].split("\n\n", 1)[0].splitlines()
    header = [cell.strip(" `/") for cell in ("| module |" + rows[0]).strip("|").split("|")]
    table: dict[str, dict[str, bool]] = {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0].strip("`")] = {fw: cells[header.index(fw)] != "—" for fw in BUILTINS}
    return table


@pytest.mark.parametrize("framework", BUILTINS)
def test_each_framework_has_a_package_with_the_same_module_names(framework: str) -> None:
    package = ROOT / "adapters" / framework
    for module in ("__init__.py", "adapter.py", "layers.py", "mathmode.py", "build.py", "locks/cpu.in",
                   "locks/cpu.txt"):
        assert (package / module).is_file(), f"adapters/{framework}/{module}"
    assert adapter_target(framework) == f"adapters.{framework}:{adapter_class(framework).__name__}"
    assert adapter_class(framework).__module__ == f"adapters.{framework}.adapter"
    for role in ("read", "apply"):  # one math-mode API in every framework's package
        assert callable(getattr(importlib.import_module(f"adapters.{framework}.mathmode"), role))
    assert callable(importlib.import_module(f"adapters.{framework}.build").gpu_build)
    # the build template's hooks live in layers.py, as a mixin the adapter inherits, in every package
    hooks = vars(importlib.import_module(f"adapters.{framework}.layers"))
    assert any(isinstance(v, type) and "layer_residual" in vars(v) and issubclass(adapter_class(framework), v)
               for v in hooks.values()), f"adapters/{framework}/layers.py has no hooks mixin of the adapter"


@pytest.mark.parametrize("framework", BUILTINS)
def test_the_package_holds_exactly_the_modules_docs_adapters_md_lists_for_it(framework: str) -> None:
    """One name per role (issue 51 item 5): a module outside the table, or one the table says is there and is not,
    is a package that drifted from the layout the docs show."""
    table = _layout_table()
    assert {"adapter.py", "layers.py", "convert.py", "optim.py", "gpu.py", "threads.py"} <= set(table), table
    listed = {module for module, has in table.items() if has[framework]}
    package = ROOT / "adapters" / framework
    present = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {p.name + "/" for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert present == listed, (sorted(present - listed), sorted(listed - present))


@pytest.mark.process
def test_the_parent_environment_holds_no_framework_and_runs_current_releases() -> None:
    """The done-when of issue 38: in .venv, torch, tensorflow, mxnet and jax are absent; numpy >= 2, pandas >= 3."""
    code = ("import importlib.util, json, numpy, pandas\n"
            "print(json.dumps({'found': [m for m in ('torch', 'tensorflow', 'mxnet', 'jax', 'jaxlib', 'keras') "
            "if importlib.util.find_spec(m)], 'numpy': numpy.__version__, 'pandas': pandas.__version__}))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # test-fast's blockers are not the parent's
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd="/")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["found"] == []
    assert int(facts["numpy"].split(".")[0]) >= 2 and int(facts["pandas"].split(".")[0]) >= 3
