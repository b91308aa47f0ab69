"""The layers of docs/architecture.md, enforced: who may import whom, and what the parent never loads.

The rules are data: :data:`LAYERS` (every module belongs to the layer of its longest listed prefix; a layer
may import its own modules, the layers it names, and the exceptions it lists, each with its reason) and
:data:`FRAMEWORK_RULES`. A static check reads every ``import`` in the source tree, those inside functions
too (a lazy import is still an edge); runtime checks import the parent's modules in a fresh interpreter and
list what got loaded. ``test_the_architecture_page_states_these_rules`` holds the page to this file: its
layer table has exactly these layers, modules and may-import lists, and names every exception.
"""

from __future__ import annotations

import ast
import graphlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.registry import framework_modules
from tests import ROOT

PACKAGES = ("harness", "adapters", "report")
#: every registered adapter's framework modules (import_name and framework_modules): a fifth adapter's is covered
#: as soon as it is registered
FRAMEWORKS = tuple(sorted(framework_modules()))


@dataclass(frozen=True)
class Layer:
    """A row of the architecture page's layer table."""

    name: str  # the row's first cell, e.g. "0. vocabulary"
    modules: tuple[str, ...]  # dotted prefixes; a module belongs to the layer of its longest matching prefix
    may_import: tuple[str, ...] = ()  # other layers, by name (its own modules always)
    #: modules it may import besides those layers: (importer prefix, target prefix, why)
    exceptions: tuple[tuple[str, str, str], ...] = ()
    #: the only modules outside the standard library and the three packages it may import (None: any but a
    #: framework, see FRAMEWORK_RULES)
    third_party: tuple[str, ...] | None = None


VOCABULARY, DESCRIPTION, DATA, MONITOR = "0. vocabulary", "0. description", "1. data", "2. monitor"
STORE, RUN, MAXBATCH, PIPELINE, CLI = "2. store", "3. run", "4. max batch", "5. pipeline", "6. command line"
ENVS = "1. environments"
REPORT_INPUT, ANSWER, DOCUMENT, ADAPTERS = "report: input", "report: answer", "report: document", "adapters"
BELOW_DATA = (VOCABULARY, DESCRIPTION)

LAYERS = (
    Layer(VOCABULARY, ("harness", "harness.errors", "harness.numbers", "harness.tmpnames", "harness.capture",
                       "harness.gpu_peaks", "harness.monitor.fields", "harness.series", "harness.registry"),
          exceptions=(("harness.registry", "adapters.base", "for type annotations only"),),
          third_party=("numpy",)),
    Layer(DESCRIPTION, ("harness.models", "harness.config", "harness.records", "harness.data.known",
                        "harness.data.prepared", "harness.data.checks", "harness.flops"), (VOCABULARY,),
          exceptions=(
              ("harness.config.experiment", "harness.data.npzfile",
               "loading an experiment checks that its npz file exists and is readable"),
              ("harness.data.prepared", "harness.data.footprint", "writing prepared data checks the disk space"),
              ("harness.data.prepared", "harness.data.npzfile", "a prepared npz data set's cache is named after it"),
          ),
          third_party=("numpy", "tomli")),
    Layer(DATA, ("harness.data",), BELOW_DATA),
    Layer(ENVS, ("harness.envs",), BELOW_DATA,
          exceptions=(("harness.envs.runtime", "adapters.base", "for type annotations only"),)),
    Layer(MONITOR, ("harness.monitor",), (*BELOW_DATA, DATA)),
    Layer(STORE, ("harness.store", "harness.cells"), (*BELOW_DATA, DATA)),
    Layer(RUN, ("harness.run",), (*BELOW_DATA, DATA, ENVS, MONITOR, STORE),
          exceptions=(("harness.run.worker", "adapters.base", "the worker, in the child, drives the adapter"),
                      ("harness.run.protocol", "adapters.records",
                       "the worker's Ready message carries the adapter's setup record (plain data, no framework)"),
                      ("harness.run.worker", "adapters.fpenv",
                       "the worker sets the CPU's denormal mode before the adapter loads its framework"))),
    Layer(MAXBATCH, ("harness.maxbatch",), (*BELOW_DATA, DATA, ENVS, MONITOR, STORE, RUN)),
    Layer(PIPELINE, ("harness.pipeline",), (*BELOW_DATA, DATA, ENVS, MONITOR, STORE, RUN, MAXBATCH)),
    Layer(REPORT_INPUT, ("report", "report.load"), (*BELOW_DATA, STORE)),
    Layer(ANSWER, ("report.answer",), (*BELOW_DATA, STORE, REPORT_INPUT)),
    Layer(DOCUMENT, ("report.document",), (*BELOW_DATA, STORE, REPORT_INPUT, ANSWER),
          exceptions=(("report.document.tables", "harness.maxbatch.advice",
                       "the max-batch table words the stored answer's advice (pure, no prober)"),)),
    Layer(CLI, ("harness.cli", "harness.__main__"),
          (*BELOW_DATA, DATA, ENVS, MONITOR, STORE, RUN, MAXBATCH, PIPELINE, REPORT_INPUT, ANSWER, DOCUMENT,
           ADAPTERS)),
    Layer(ADAPTERS, ("adapters",), exceptions=tuple(
        ("adapters", target, "the contract, the model description, the errors and the trial's settings")
        for target in ("harness.models", "harness.errors", "harness.config.trial", "harness.config.precision"))),
)


@dataclass(frozen=True)
class FrameworkRule:
    """Modules under ``importer`` import no framework (at all, or at module level only)."""

    importer: str
    why: str
    exempt: tuple[str, ...] = ()
    module_level_only: bool = False


FRAMEWORK_RULES = (
    FrameworkRule("harness", "the parent never imports a framework; the worker, in the child, loads one adapter",
                  exempt=("harness.run.worker",)),
    FrameworkRule("report", "the report reads only the store: it rebuilds with no framework installed"),
    FrameworkRule("adapters", "adapter modules import their framework inside methods, so listing adapters stays "
                              "cheap", module_level_only=True),
)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, module_level: bool = False, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth of the file (or at module level only), with its line.

    ``from pkg import x`` is an edge to ``pkg.x`` when that is a module under ``root``, else to ``pkg``.
    Imports under ``if TYPE_CHECKING:`` count: the type checker reads them, and the modules need each other.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = _module_level(tree) if module_level else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out += [(node.lineno, f"{mod}.{alias.name}" if _is_module(root, f"{mod}.{alias.name}") else mod)
                    for alias in node.names]
    return out


def _is_module(root: Path, dotted: str) -> bool:
    where = root.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The statements that run when the module is imported: all but those inside functions."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        stack += [c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                              ast.Lambda))]
    return out


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> Layer | None:
    """The layer whose longest prefix holds ``module`` (None: outside the three packages)."""
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for prefix in layer.modules:
            if under(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def _edge_problem(name: str, layer: Layer, target: str) -> str | None:
    """Why ``name`` (in ``layer``) may not import ``target``, or None."""
    target_layer = layer_of(target)
    if target_layer is None:
        top = target.partition(".")[0]
        if layer.third_party is None or top in sys.stdlib_module_names or top in layer.third_party or not top:
            return None
        return f"{layer.name} imports only the standard library and {', '.join(layer.third_party)}"
    if target_layer is layer or target_layer.name in layer.may_import:
        return None
    if any(under(name, imp) and under(target, tgt) for imp, tgt, _ in layer.exceptions):
        return None
    allowed = ", ".join(layer.may_import) or "only its listed exceptions"
    return f"{layer.name} may import {allowed}, not {target_layer.name}"


def violations(root: Path) -> list[str]:
    """Edges in the tree at ``root`` that the rules forbid, as 'file:line: a -> b (why)'."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            layer = layer_of(name)
            if layer is None:
                found.append(f"{path.relative_to(root)}: {name} is in no layer of docs/architecture.md")
                continue
            for line, target in imports_of(path, name, root=root):
                problem = _edge_problem(name, layer, target)
                if problem:
                    found.append(f"{path.relative_to(root)}:{line}: {name} -> {target} ({problem})")
            for rule in FRAMEWORK_RULES:
                if not under(name, rule.importer) or any(under(name, e) for e in rule.exempt):
                    continue
                for line, target in imports_of(path, name, rule.module_level_only, root):
                    if any(under(target, f) for f in FRAMEWORKS):
                        found.append(f"{path.relative_to(root)}:{line}: {name} -> {target} ({rule.why})")
    return sorted(set(found))


def import_cycles(root: Path) -> list[list[str]]:
    """An import cycle among the three packages' modules: ``[]``, or ``[its modules, sorted]``.

    Every import counts: lazy ones (inside functions) and those under ``if TYPE_CHECKING:`` too. A type-only import
    never runs, but the two modules still need each other to be read, type-checked or moved (issue 39 found four
    such circles, one through seven files). ``from pkg import x`` is an edge to ``pkg.x`` where that is a module; a
    package's own ``__init__`` re-exports are not followed when a module imports from a module inside it.
    """
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            graph[name] = {t for _, t in imports_of(path, name, root=root)}

    def resolved(target: str) -> str:  # ``from pkg import name`` is an edge to the package
        while target and target not in graph:
            target = target.rpartition(".")[0]
        return target

    edges = {n: {resolved(t) for t in targets} - {"", n} for n, targets in graph.items()}
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as e:
        return [sorted(set(e.args[1]))]
    return []


def test_no_module_imports_itself_round_a_cycle() -> None:
    """Import cycles, lazy and type-only imports included (issue 30 found three; one ran through 7 files and two
    layers): a cycle is two modules that need each other, so neither can be read, tested or moved alone."""
    assert import_cycles(ROOT) == [], "an import cycle: " + " -> ".join(*import_cycles(ROOT))


def test_a_lazy_cycle_and_a_type_only_cycle_are_caught(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "a.py").write_text("from harness import b\n")
    (tmp_path / "harness" / "b.py").write_text("def f():\n    from harness.c import g\n    return g\n")
    (tmp_path / "harness" / "c.py").write_text("def g():\n    import harness.a\n")
    assert import_cycles(tmp_path) == [["harness.a", "harness.b", "harness.c"]]
    (tmp_path / "harness" / "c.py").write_text("def g(): ...\n")
    assert import_cycles(tmp_path) == []
    (tmp_path / "report" / "x.py").write_text("from report.y import Y\n")
    (tmp_path / "report" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from report.x import X\nclass Y: ...\n")
    assert import_cycles(tmp_path) == [["report.x", "report.y"]]


def test_the_source_tree_keeps_its_layers() -> None:
    found = violations(ROOT)
    assert not found, "imports that break the layers of docs/architecture.md:\n" + "\n".join(found)


def test_a_deliberate_back_edge_is_caught(tmp_path: Path) -> None:
    """The check is not vacuous: a report module that imports the executor, a store that imports the sweep, a
    lazy import of the CLI inside a function, vocabulary importing pandas and an adapter importing its framework at
    module level are all reported; an adapter's import inside a method is not."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "store").mkdir()
    (tmp_path / "harness" / "store" / "__init__.py").write_text("from harness.run.sweep import run_sweep\n")
    (tmp_path / "report" / "load.py").write_text("from harness.run.executor import LocalExecutor\n")
    (tmp_path / "harness" / "models.py").write_text("def f():\n    from harness.cli import main\n    return main\n")
    (tmp_path / "harness" / "flops.py").write_text("import pandas\n")
    (tmp_path / "report" / "fine.py").write_text("from harness.store import Store\nfrom harness.errors import X\n")
    (tmp_path / "adapters" / "eager.py").write_text(f"import {FRAMEWORKS[0]}\n")
    (tmp_path / "adapters" / "lazy.py").write_text(f"class A:\n    def setup(self):\n        import {FRAMEWORKS[0]}\n")
    found = violations(tmp_path)
    assert any("report.load -> harness.run.executor" in f for f in found), found
    assert any("harness.store -> harness.run.sweep" in f for f in found), found
    assert any("harness.models -> harness.cli" in f for f in found), found
    assert any("harness.flops -> pandas" in f for f in found), found
    assert any(f"adapters.eager -> {FRAMEWORKS[0]} (adapter modules import their framework inside" in f
               for f in found), found
    assert not any("report.fine" in f or "adapters.lazy" in f for f in found), found


def _loaded_after(*modules: str, code: str = "") -> list[str]:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in modules) + code +
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                          timeout=120)
    return json.loads(done.stdout)


def _frameworks_in(loaded: list[str]) -> list[str]:
    return [m for m in loaded if any(under(m, f) for f in FRAMEWORKS)]


@pytest.mark.process
def test_importing_the_report_loads_no_executor_sampler_data_loader_or_framework() -> None:
    loaded = _loaded_after("report.document.build", "report.load", "report.answer.thesis")
    bad = [m for m in loaded if any(under(m, p) for p in (
        "harness.run", "harness.monitor.sampler", "harness.monitor.nvml", "harness.maxbatch.probes",
        "harness.maxbatch.searching",
        "harness.data.catalogue", "harness.data.cifar10", "adapters", *FRAMEWORKS))]
    assert not bad, f"importing the report loaded {bad}"
    # without the plotting stack (pandas and seaborn bring these themselves) reading a store loads no downloader
    light = _loaded_after("report.load", "report.answer.thesis")
    assert not [m for m in light if m in ("tarfile", "urllib.request")], "reading a store loaded a downloader"


@pytest.mark.process
def test_importing_the_store_loads_no_executor() -> None:
    loaded = _loaded_after("harness.store", "harness.store.export")
    bad = [m for m in loaded if under(m, "harness.run") or under(m, "harness.monitor.sampler")]
    assert not bad, f"importing the store loaded {bad}"


@pytest.mark.process
def test_the_parent_loads_no_framework_listing_adapters_included() -> None:
    """The command line, the sweep, the executor, the sampler, the max-batch search, and every registered adapter
    class (as listing and validating options does) together load no framework."""
    loaded = _loaded_after("harness.cli", "harness.pipeline", "harness.run.sweep", "harness.run.executor",
                           "harness.monitor.sampler", "harness.maxbatch.searching", "harness.registry",
                           code="[harness.registry.adapter_class(n) for n in harness.registry.known_adapter_names()]\n")
    assert not _frameworks_in(loaded), f"the parent loaded {_frameworks_in(loaded)}"


@pytest.mark.process
def test_package_inits_stay_light() -> None:
    """Importing the data-set names loads no loader and no downloader (harness/data/__init__.py loads them on
    first use)."""
    loaded = _loaded_after("harness.data.known", "harness.data")
    heavy = [m for m in loaded if m in ("harness.data.catalogue", "harness.data.cifar10", "harness.data.embedded",
                                        "tarfile", "urllib.request")]
    assert not heavy, f"importing harness.data loaded {heavy}"


def _layer_table(text: str) -> dict[str, tuple[set[str], str]]:
    """The page's layer table: row name -> (its modules as dotted names, its may-import cell)."""
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[set[str], str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        modules = {m.removesuffix(".py").removesuffix("/").replace("/", ".").removesuffix(".__init__")
                   for m in re.findall(r"`([^`]+)`", cells[1])}
        rows[cells[0]] = (modules, cells[3])
    return rows


def test_the_architecture_page_states_these_rules() -> None:
    """docs/architecture.md claims what this file checks: the same layers, modules and may-import lists, each
    exception named, each framework rule stated."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = _layer_table(text)
    assert set(rows) == {layer.name for layer in LAYERS}, sorted(set(rows) ^ {layer.name for layer in LAYERS})
    for layer in LAYERS:
        modules, may_import = rows[layer.name]
        assert modules == set(layer.modules), (layer.name, sorted(modules ^ set(layer.modules)))
        said = may_import.split(";")[0]
        assert said == (", ".join(layer.may_import) or "its exceptions only"), (layer.name, said)
        for importer, target, why in layer.exceptions:
            assert f"`{importer}` → `{target}`" in may_import and why in may_import, (layer.name, importer, target)
        if layer.third_party is not None:
            assert f"third party: {', '.join(layer.third_party)}" in may_import, layer.name
    for rule in FRAMEWORK_RULES:
        assert rule.why.lower() in text.lower(), rule.why
