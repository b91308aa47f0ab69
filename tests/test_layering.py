"""The layers of docs/architecture.md, enforced: who may import whom.

Two checks. A static one reads every ``import`` in the source tree, those inside functions too (a lazy
import is still an edge), and fails on an edge the rules forbid. A runtime one imports the report, the
store and the sweep in a fresh interpreter and lists what got loaded. The rules are data (:data:`RULES`),
and the test below them shows that a deliberate back-edge is caught.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.registry import framework_modules
from tests import ROOT

PACKAGES = ("harness", "adapters", "report")
#: every registered adapter's framework modules (import_name and framework_modules): a fifth adapter's is covered
#: as soon as it is registered
FRAMEWORKS = tuple(sorted(framework_modules()))


@dataclass(frozen=True)
class Rule:
    """Modules under ``importer`` (a dotted prefix) must not import anything under ``forbidden``."""

    importer: str
    forbidden: tuple[str, ...]
    why: str
    exempt: tuple[str, ...] = ()


RULES = (
    Rule("report", ("harness.run", "harness.monitor.sampler", "harness.monitor.probes", "harness.monitor.nvml",
                    "harness.monitor.environment", "harness.maxbatch.prober", "harness.maxbatch.request",
                    "harness.pipeline", "harness.cli", "harness.data.catalogue", "adapters", *FRAMEWORKS),
         "the report reads only the store: it must rebuild with no framework, no GPU and no executor"),
    Rule("harness.store", ("harness.run", "harness.monitor.sampler", "harness.maxbatch", "harness.pipeline",
                           "harness.cli", "report", "adapters"),
         "the store records outcomes; it must not know how they were produced"),
    Rule("harness.run", ("harness.maxbatch", "harness.pipeline", "harness.cli", "report"),
         "the sweep knows nothing of the max-batch search (harness.pipeline composes them)"),
    Rule("harness.maxbatch", ("harness.pipeline", "harness.cli", "report"),
         "the search is a library; commands and the pipeline sit above it"),
    Rule("harness.monitor", ("harness.run", "harness.maxbatch", "harness.pipeline", "harness.cli", "report",
                             "adapters", *FRAMEWORKS),
         "the sampler watches a worker from outside; it needs only the records"),
    Rule("harness.config", ("harness.run", "harness.monitor", "harness.maxbatch", "harness.store",
                            "harness.pipeline", "harness.cli", "report"),
         "configuration is the bottom layer: everything reads it, it reads nothing above it"),
    Rule("harness.data", ("harness.run", "harness.monitor", "harness.maxbatch", "harness.store",
                          "harness.pipeline", "harness.cli", "report", "adapters", *FRAMEWORKS),
         "data preparation runs in the parent and knows no framework"),
    Rule("harness.models", ("harness.run", "harness.monitor", "harness.maxbatch", "harness.store",
                            "harness.pipeline", "harness.cli", "report", "adapters", *FRAMEWORKS),
         "the model description is framework-neutral and imported by plugins"),
    Rule("harness.records", ("harness.run", "harness.monitor", "harness.maxbatch", "harness.store",
                             "harness.pipeline", "harness.cli", "report"),
         "the seam types are a leaf every layer may use"),
    Rule("adapters", ("harness.run", "harness.monitor", "harness.maxbatch", "harness.store", "harness.pipeline",
                      "harness.cli", "report"),
         "adapters see only the contract, the model description and the errors"),
    Rule("harness", ("harness.cli",), "nothing below the command line imports it",
         exempt=("harness.cli", "harness.__main__")),
    Rule("harness", FRAMEWORKS, "the parent never imports a framework",
         exempt=("harness.run.worker",)),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth of the file, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]  # from pkg import submodule
    return out


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(root: Path) -> list[str]:
    """Edges in the tree at ``root`` that the rules forbid, as 'file:line: a -> b (why)'."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            for line, target in imports_of(path, name):
                for rule in RULES:
                    if not under(name, rule.importer) or any(under(name, e) for e in rule.exempt):
                        continue
                    bad = next((f for f in rule.forbidden if under(target, f)), None)
                    if bad is not None and not under(name, bad):
                        found.append(f"{path.relative_to(root)}:{line}: {name} -> {target} ({rule.why})")
    return sorted(set(found))


def test_the_source_tree_keeps_its_layers() -> None:
    found = violations(ROOT)
    assert not found, "imports that break the layers of docs/architecture.md:\n" + "\n".join(found)


def test_a_deliberate_back_edge_is_caught(tmp_path: Path) -> None:
    """The check is not vacuous: a report module that imports the executor, a store that imports the sweep,
    and a lazy import of the CLI inside a function are all reported."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "store").mkdir()
    (tmp_path / "harness" / "store" / "__init__.py").write_text("from harness.run.sweep import run_sweep\n")
    (tmp_path / "report" / "load.py").write_text("from harness.run.executor import LocalExecutor\n")
    (tmp_path / "harness" / "models.py").write_text("def f():\n    from harness.cli import main\n    return main\n")
    (tmp_path / "report" / "fine.py").write_text("from harness.store import Store\nfrom harness.errors import X\n")
    found = violations(tmp_path)
    assert any("report.load -> harness.run.executor" in f for f in found), found
    assert any("harness.store -> harness.run.sweep" in f for f in found), found
    assert any("harness.models -> harness.cli" in f for f in found), found
    assert not any("report.fine" in f for f in found), found


def _loaded_after(*modules: str) -> list[str]:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in modules) +
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                          timeout=120)
    return json.loads(done.stdout)


def test_importing_the_report_loads_no_executor_sampler_data_loader_or_framework() -> None:
    loaded = _loaded_after("report.build", "report.load", "report.thesis")
    bad = [m for m in loaded if any(under(m, p) for p in (
        "harness.run", "harness.monitor.sampler", "harness.monitor.nvml", "harness.maxbatch.prober",
        "harness.data.catalogue", "harness.data.cifar10", "adapters", *FRAMEWORKS))]
    assert not bad, f"importing the report loaded {bad}"
    # without the plotting stack (pandas and seaborn bring these themselves) reading a store loads no downloader
    light = _loaded_after("report.load", "report.thesis")
    assert not [m for m in light if m in ("tarfile", "urllib.request")], "reading a store loaded a downloader"


def test_importing_the_store_loads_no_executor() -> None:
    loaded = _loaded_after("harness.store", "harness.store.export")
    bad = [m for m in loaded if under(m, "harness.run") or under(m, "harness.monitor.sampler")]
    assert not bad, f"importing the store loaded {bad}"
