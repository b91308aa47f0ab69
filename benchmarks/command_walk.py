"""How far a reader walks through the code to follow one command (issue 51): a static call walk from the command's
function, counted.

From the entry (``harness.cli.maxbatch:cmd_maxbatch`` by default), every call the code makes to a function of
batchscope's own (``harness``, ``adapters``) that can be named from the source alone is followed, depth first, in the
order the calls are written, each function once, up to ``--depth`` calls deep: a module-level function called by name
(imported, lazily too, or its own), ``module.function``, ``Class(...)`` (its ``__init__`` / ``__post_init__``),
``Class.method`` and ``self.method``, and a method called on an object whose class the source says: a parameter or a
field annotated with one of batchscope's classes, or a local name assigned from ``Class(...)`` or from a call
annotated to return one (``search = MaxBatchSearch.build(...)``, then ``search.run(...)``). Other calls on objects
(an element of a list, a property's value) cannot be resolved without inferring types, so the walk undercounts; it
counts the same way before and after a change, which is what it is for.

Printed: the stops (functions visited), the modules they are in, the climbs (a stop in a module the walk had left
before, that is not the module of the stop just before it) and how often the registry (``harness.registry``) is
entered. ``--root`` reads another checkout (e.g. ``git archive COMMIT | tar -x -C /tmp/before``) to compare.

    python benchmarks/command_walk.py                                  # maxbatch, this checkout
    python benchmarks/command_walk.py --entry harness.cli.run:cmd_run
    python benchmarks/command_walk.py --root /tmp/before --show
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("harness", "adapters")


@dataclass
class Module:
    """One parsed module: its functions (``name`` or ``Class.name``) and the names it imports (alias -> dotted)."""

    name: str
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)
    imports: dict[str, str] = field(default_factory=dict)
    #: a class's annotated fields (``Class.attr`` -> annotation), for calls on ``self.attr``
    fields: dict[str, ast.expr] = field(default_factory=dict)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(node: ast.AST, package: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - n.level + 1], *([n.module] if n.module else [])])
            for alias in n.names:
                out[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(n, ast.Import):
            for alias in n.names:
                out[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else \
                    alias.name.partition(".")[0]
    return out


def load(root: Path) -> dict[str, Module]:
    """Every module of :data:`PACKAGES` under ``root``."""
    modules: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = _module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            mod = Module(name, imports=_imports(tree, name if path.name == "__init__.py" else name.rpartition(".")[0]))
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    mod.functions[node.name] = node
                elif isinstance(node, ast.ClassDef):
                    mod.classes.add(node.name)
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            mod.functions[f"{node.name}.{item.name}"] = item
                        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                            mod.fields[f"{node.name}.{item.target.id}"] = item.annotation
            modules[name] = mod
    return modules


def _target(modules: dict[str, Module], dotted: str) -> tuple[str, str] | None:
    """(module, function or Class) that ``dotted`` (``harness.x.f``, ``harness.x.Class``) names, following one
    re-export (``from harness.envs.runtime import X`` in a package ``__init__``)."""
    mod, _, attr = dotted.rpartition(".")
    for _ in range(3):
        m = modules.get(mod)
        if m is None:
            return None
        if attr in m.functions or attr in m.classes:
            return mod, attr
        if attr in m.imports:
            mod, _, attr = m.imports[attr].rpartition(".")
            continue
        return None
    return None


def _class_of(modules: dict[str, Module], names: dict[str, str], mod: Module, ann: ast.expr | None
              ) -> tuple[str, str] | None:
    """The (module, Class) of batchscope's own that an annotation names (``X``, ``"X"``, ``X | None``), else None."""
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        return _class_of(modules, names, mod, ann.left) or _class_of(modules, names, mod, ann.right)
    if isinstance(ann, ast.Name):
        if ann.id in mod.classes:
            return mod.name, ann.id
        found = _target(modules, names[ann.id]) if ann.id in names else None
        return found if found and found[1] in modules[found[0]].classes else None
    return None


def _in_evaluation_order(fn: ast.AST) -> list[ast.Call]:
    """The calls in ``fn``'s body in the order Python makes them: statements in order, and within one, a call's
    arguments (and the object its method is looked up on) before the call itself (``f(g(x))``: g, then f). Nested
    functions and lambdas are read where they are written."""
    out: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            visit(child)
        if isinstance(node, ast.Call):
            out.append(node)

    for stmt in getattr(fn, "body", []):
        visit(stmt)
    return out


def _callees(modules: dict[str, Module], mod: Module, qual: str, fn: ast.AST) -> list[tuple[str, str]]:
    """The functions ``fn`` calls that the source names, in the order written.

    Calls on an object are followed where its class can be read from the source: a parameter or field annotated
    with one of batchscope's classes, or a local variable assigned from ``Class(...)`` or from a call whose function
    is annotated to return one (``search = MaxBatchSearch.build(...)``; ``search.run(...)`` then is
    ``MaxBatchSearch.run``)."""
    local = {**mod.imports, **_imports(fn, mod.name.rpartition(".")[0])}
    cls = qual.split(".")[0] if "." in qual else None
    out: list[tuple[str, str]] = []
    typed: dict[str, tuple[str, str]] = {}  # local name -> (module, Class)

    def add(found: tuple[str, str] | None) -> None:
        if found is None:
            return
        m, name = found
        if name in modules[m].classes:  # a constructor: what it runs
            for init in ("__init__", "__post_init__"):
                if f"{name}.{init}" in modules[m].functions:
                    out.append((m, f"{name}.{init}"))
            return
        out.append(found)

    def resolve(call: ast.Call) -> tuple[str, str] | None:
        """The function (or Class) a call names, without following it."""
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in mod.functions or f.id in mod.classes:
                return mod.name, f.id
            return _target(modules, local[f.id]) if f.id in local else None
        if not isinstance(f, ast.Attribute):
            return None
        owner = _owner_class(f.value)
        if owner is not None:
            return (owner[0], f"{owner[1]}.{f.attr}") if f"{owner[1]}.{f.attr}" in modules[owner[0]].functions \
                else None
        if isinstance(f.value, ast.Name) and f.value.id in local:
            dotted = local[f.value.id]
            if dotted in modules:  # module.function
                return _target(modules, f"{dotted}.{f.attr}")
            found = _target(modules, dotted)  # an imported Class.method
            if found and f"{found[1]}.{f.attr}" in modules[found[0]].functions:
                return found[0], f"{found[1]}.{f.attr}"
        return None

    def _owner_class(value: ast.expr) -> tuple[str, str] | None:
        """The class of the object a method is called on, where the source says it."""
        if isinstance(value, ast.Name):
            if value.id in ("self", "cls") and cls:
                return mod.name, cls
            if value.id in mod.classes:
                return mod.name, value.id
            return typed.get(value.id)
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self" and cls:
            return _class_of(modules, local, mod, mod.fields.get(f"{cls}.{value.attr}"))
        return None

    def returns(found: tuple[str, str] | None) -> tuple[str, str] | None:
        """The class a called function or constructor gives back, where annotated."""
        if found is None:
            return None
        m, name = found
        if name in modules[m].classes:
            return found
        node = modules[m].functions.get(name)
        if node is None or node.returns is None:
            return None
        ret = node.returns
        if isinstance(ret, ast.Constant) and ret.value in ("Self",) or isinstance(ret, ast.Name) and ret.id == "Self":
            return (m, name.split(".")[0]) if "." in name else None
        return _class_of(modules, {**modules[m].imports}, modules[m], ret)

    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            found = _class_of(modules, local, mod, a.annotation)
            if found:
                typed[a.arg] = found
    calls = _in_evaluation_order(fn)
    assigned = {id(n.value): n.targets[0].id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)}
    for call in calls:
        found = resolve(call)
        add(found)
        if id(call) in assigned:  # name = call(...): its class, if the source says it
            kind = returns(found)
            if kind is not None:
                typed[assigned[id(call)]] = kind
    return out


def walk(modules: dict[str, Module], entry: tuple[str, str], depth: int) -> list[tuple[str, str]]:
    """The stops, depth first, each function once."""
    seen: set[tuple[str, str]] = set()
    stops: list[tuple[str, str]] = []

    def visit(where: tuple[str, str], level: int) -> None:
        if where in seen:
            return
        seen.add(where)
        stops.append(where)
        if level >= depth:
            return
        mod = modules[where[0]]
        for callee in _callees(modules, mod, where[1], mod.functions[where[1]]):
            visit(callee, level + 1)

    visit(entry, 0)
    return stops


def climbs(stops: list[tuple[str, str]]) -> int:
    """Stops in a module the walk had left before (not the module of the stop just before)."""
    left: set[str] = set()
    count = 0
    for before, now in zip(stops, stops[1:], strict=False):
        if now[0] != before[0]:
            left.add(before[0])
            if now[0] in left:
                count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    """Walk one command and print its counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--entry", default="harness.cli.maxbatch:cmd_maxbatch", help="MODULE:FUNCTION")
    parser.add_argument("--depth", type=int, default=3, help="calls deep from the entry (default 3)")
    parser.add_argument("--show", action="store_true", help="print every stop")
    args = parser.parse_args(argv)
    modules = load(args.root)
    module, _, function = args.entry.partition(":")
    stops = walk(modules, (module, function), args.depth)
    if args.show:
        for m, f in stops:
            print(f"  {m}:{f}")
    registry = sum(1 for before, now in zip([("", ""), *stops], stops, strict=False)
                   if now[0] == "harness.registry" and before[0] != "harness.registry")
    print(f"{args.entry} (depth {args.depth}): {len(stops)} stops in {len({m for m, _ in stops})} modules, "
          f"{climbs(stops)} climbs back to a module already left, registry entered {registry} times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
