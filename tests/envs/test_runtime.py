"""Issue 51, item 1: a framework as a command resolved it is one value (``harness.envs.runtime.FrameworkRuntime``),
made once per command and handed down explicitly; no module-level state chooses interpreters (a Ray node's process
would not have it: issue 50, item 2). Issue 50, item 6: an interpreter named for a framework the command does not run
is refused (``--python``) or said (an experiment file's), never ignored without a word."""

from __future__ import annotations

import ast
import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.envs import resolve
from harness.envs.resolve import Interpreter
from harness.envs.runtime import FLAG, FrameworkRuntime, resolve_runtimes, unchecked_runtime
from harness.errors import ConfigError
from harness.records import TrialUnit
from tests import ROOT
from tests.conftest import make_trial
from tests.fakes.registry import register_fake

PACKAGES = ("harness", "adapters", "report")
#: calls that make a mutable container
MUTABLE_CALLS = frozenset({"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter"})
#: methods that change a container in place
MUTATORS = frozenset({"update", "setdefault", "append", "extend", "add", "clear", "pop", "popitem", "remove", "insert",
                      "discard", "__setitem__"})
#: words that, in a module-level name or annotation, say it holds interpreters or a framework's resolution
CHOICE_WORDS = ("interpreter", "runtime", "chosen", "choice", "python")
#: modules that choose or carry interpreters: the environments layer, and whatever imports it
ENVS = "harness.envs"
#: module-level tables a function changes that choose no interpreter, each with why (every other one fails the check)
NOT_CHOICES = {
    ("harness/envs/inuse.py", "_HELD"): "the environment locks this process holds: flock locks an open file, so one "
                                        "process keeps one per environment (a second open would wait for the first); "
                                        "a fresh process, a Ray node's, rightly holds none",
    ("harness/cli/__init__.py", "_RECEIVED"): "the signals received while a command ran; the command line imports the "
                                              "environments layer only to let their locks go at the command's end",
}


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in MUTABLE_CALLS
    return False


def _imports_envs(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ENVS):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith(ENVS) for a in node.names):
            return True
    return False


def _mutated(tree: ast.Module, names: set[str]) -> set[str]:
    """Which of the module-level ``names`` a function of the module changes in place (``NAME[k] = v``,
    ``NAME.update(...)``, ``NAME |= ...``, ``del NAME[k]``) or rebinds (``global NAME``)."""
    out: set[str] = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
        for node in ast.walk(fn):
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            for target in targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(base, ast.Name) and base.id in names and (
                        isinstance(target, ast.Subscript) or isinstance(node, ast.AugAssign)):
                    out.add(base.id)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in names \
                    and node.func.attr in MUTATORS:
                out.add(node.func.value.id)
            if isinstance(node, ast.Global):
                out.update(set(node.names) & names)
    return out


def state_choosing_interpreters(root: Path) -> list[str]:
    """Module-level mutable state that could choose an interpreter, as ``path:line: what``:

    * in the environments layer and every module that imports it: a module-level container that a function changes,
      any ``global`` statement, any ``functools.cache`` / ``lru_cache`` (each a memory that a fresh process, a Ray
      node's, lacks); a constant table (never changed) is no state;
    * anywhere in harness/, adapters/ and report/: a module-level mutable container whose name or annotation speaks
      of interpreters, runtimes or a choice (``_CHOSEN: dict[str, Interpreter] = {}``).
    """
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            strict = _module(path, root).startswith(ENVS) or _imports_envs(tree)
            where = f"{path.relative_to(root)}"
            tables: dict[str, int] = {}
            for node in tree.body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and _mutable(node.value):
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    said = (ast.unparse(target) + " " + (ast.unparse(node.annotation)
                                                         if isinstance(node, ast.AnnAssign) else "")).lower()
                    if any(word in said for word in CHOICE_WORDS):
                        found.append(f"{where}:{node.lineno}: module-level mutable {ast.unparse(target)}")
                    elif isinstance(target, ast.Name):
                        tables[target.id] = node.lineno
            if not strict:
                continue
            for name in sorted(_mutated(tree, set(tables)) - {n for w, n in NOT_CHOICES if w == where}):
                found.append(f"{where}:{tables[name]}: module-level mutable {name}, changed by a function")
            for node in ast.walk(tree):
                if isinstance(node, ast.Global):
                    found.append(f"{where}:{node.lineno}: global {', '.join(node.names)}")
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for deco in node.decorator_list:
                        text = ast.unparse(deco)
                        if text.split("(")[0].rsplit(".", 1)[-1] in ("cache", "lru_cache"):
                            found.append(f"{where}:{node.lineno}: {node.name} memoised by @{text}")
    return found


def test_no_module_level_state_chooses_interpreters() -> None:
    found = state_choosing_interpreters(ROOT)
    assert not found, "module-level state where a command's choice of interpreter belongs in its runtimes:\n" + \
        "\n".join(found)
    assert not any(hasattr(resolve, name) for name in ("_CHOSEN", "chosen", "forget"))


def test_the_state_check_catches_a_planted_choice(tmp_path: Path) -> None:
    """Not vacuous: the old ``_CHOSEN`` table, a global, a memoised chooser and a named table elsewhere are each
    reported; a constant tuple and a mutable table in a module that has nothing to do with interpreters are not."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "envs").mkdir()
    (tmp_path / "harness" / "envs" / "__init__.py").write_text("")
    (tmp_path / "harness" / "envs" / "resolve.py").write_text(
        "_CHOSEN: dict[str, 'Interpreter'] = {}\nWORKER_PACKAGES = ('harness', 'adapters')\n")
    (tmp_path / "harness" / "probes.py").write_text(
        "from harness.envs.resolve import choose\nfrom functools import cache\n_SEEN = None\n"
        "def pick():\n    global _SEEN\n    _SEEN = 1\n@cache\ndef interpreter_of(fw):\n    return fw\n")
    (tmp_path / "report" / "tables.py").write_text("_PYTHONS = {}\nCOLUMNS = {'a': 1}\n")
    (tmp_path / "harness" / "devices.py").write_text(
        "from harness.envs import resolve\nNOTES = {'mxnet': 'no cap'}\n_SEEN = {}\n"
        "def remember(fw, it):\n    _SEEN[fw] = it\n")
    found = state_choosing_interpreters(tmp_path)
    assert any("devices.py:3: module-level mutable _SEEN, changed by a function" in f for f in found), found
    assert not any("NOTES" in f for f in found), found
    assert any("resolve.py:1: module-level mutable _CHOSEN" in f for f in found), found
    assert any("probes.py:5: global _SEEN" in f for f in found), found
    assert any("interpreter_of memoised by @cache" in f for f in found), found
    assert any("tables.py:1: module-level mutable _PYTHONS" in f for f in found), found
    assert not any("WORKER_PACKAGES" in f or "COLUMNS" in f for f in found), found


#: modules that run in a framework's interpreter, not the parent's: they import the target they are given
CHILD_MODULES = ("harness/run/worker/", "harness/envs/facts.py")


def test_the_adapter_class_is_loaded_from_a_name_in_one_function() -> None:
    """In the parent, ``harness.registry.load_adapter`` is the only function that imports an adapter's module;
    everything else asks it (``adapter_class(name)`` before a command resolves, ``FrameworkRuntime.adapter_class``
    after). The worker and the facts script, in the framework's interpreter, import the target they were sent."""
    loaders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)).startswith(CHILD_MODULES):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                calls = [ast.unparse(c.func) for c in ast.walk(fn) if isinstance(c, ast.Call)]
                if "importlib.import_module" in calls and any("adapter" in line for line in
                                                             ast.unparse(fn).splitlines()[:1] + calls):
                    loaders.append(f"{path.relative_to(ROOT)}:{fn.name}")
    assert loaders == ["harness/registry.py:load_adapter"], loaders


def test_a_runtime_is_a_value_that_travels(monkeypatch: pytest.MonkeyPatch, tiny_data: object) -> None:
    """Immutable, picklable and equal after the trip (what a Ray task receives); its adapter class is loaded from its
    own target, and its unit carries its interpreter, code path and environment."""
    register_fake(monkeypatch)
    interpreter = Interpreter("fake", "/envs/fake-cpu-0123/bin/python", "managed", "managed fake-cpu@0123",
                              ("/envs/code/abc",), {"build": "CPU only", "gpu": False})
    runtime = FrameworkRuntime("fake", "tests.fakes.adapter:FakeAdapter", interpreter)
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.device = "gpu"  # type: ignore[misc]
    travelled = pickle.loads(pickle.dumps(runtime.on("cpu")))
    assert travelled == runtime.on("cpu") and travelled.device == "cpu" and runtime.device is None
    assert travelled.adapter_class.__name__ == "FakeAdapter" and travelled.build == "CPU only"
    assert travelled.gpu_build() == (False, "CPU only")  # read in its interpreter, not from this one's metadata
    trial = make_trial(batch_size=2)
    unit = travelled.unit(trial, tiny_data, "/tmp/order.npy", 100.0, {"X": "1"})  # type: ignore[arg-type]
    assert isinstance(unit, TrialUnit)
    assert (unit.python, unit.pythonpath, unit.environment, unit.adapter_target, unit.os_memory_limit_mib,
            unit.env) == (interpreter.python, interpreter.pythonpath, interpreter.environment,
                          "tests.fakes.adapter:FakeAdapter", 100.0, {"X": "1"})


@pytest.mark.process
def test_a_runtime_made_in_one_process_runs_in_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child chose nothing (no module of it remembers a choice): what it runs is the value it was sent."""
    register_fake(monkeypatch)
    runtime = unchecked_runtime("fake", sys.executable)
    code = ("import pickle, sys\nrt = pickle.loads(sys.stdin.buffer.read())\n"
            "print(rt.interpreter.python, rt.adapter_class.__module__)")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(runtime), capture_output=True,
                          cwd=ROOT, timeout=120, check=True)
    assert done.stdout.decode().split() == [sys.executable, "tests.fakes.adapter"]


def test_python_for_a_framework_not_run_is_refused_and_a_files_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    register_fake(monkeypatch)
    with pytest.raises(ConfigError, match=r"--python pytorch=.*'pytorch' is not run by this command \(it runs fake\)"):
        resolve_runtimes(["fake"], {"pytorch": (sys.executable, f"{FLAG} pytorch")}, "cpu")
    said: list[str] = []
    runtimes = resolve_runtimes(["fake"], {"tensorflow": (sys.executable, "e.toml: environments.tensorflow")},
                                "cpu", said.append)
    assert list(runtimes) == ["fake"] and runtimes["fake"].interpreter.source == "parent"
    assert said == [f"tensorflow: not run by this command, so the interpreter e.toml: environments.tensorflow names "
                    f"({sys.executable}) is not used"]


def _toml(path: Path, frameworks: list[str], extra: str = "") -> Path:
    path.write_text("\n".join([
        'name = "unused"', f"frameworks = {json.dumps(frameworks)}", 'model = "tiny_cnn"', 'dataset = "synthetic"',
        "synthetic_shape = [1, 8, 8]", "synthetic_samples = 64", "synthetic_classes = 3", "batch_sizes = [4]",
        "warmup_steps = 1", "timed_steps = 2", "timeout_s = 120", "eval_points = 0", 'device = "cpu"']) + "\n"
        + extra)
    return path


@pytest.mark.parametrize("command", ["run", "maxbatch"])
def test_the_command_line_refuses_python_for_a_framework_it_does_not_run(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = (["run", str(_toml(tmp_path / "e.toml", ["pytorch"]))] if command == "run" else
            ["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--device", "cpu",
             "--memory-limit-mib", "400"])
    code = main([*argv, "--python", f"tensorflow={sys.executable}", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"--python tensorflow={sys.executable}: 'tensorflow' is not run by this command (it runs pytorch)" in err
    assert not out.exists()  # nothing written


@pytest.mark.process
def test_an_experiment_files_interpreter_for_a_framework_not_run_is_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cache_dir: Path) -> None:
    """The file may serve runs that narrow its frameworks (``--frameworks``): its entry is said, and the run runs."""
    register_fake(monkeypatch)
    toml = _toml(tmp_path / "e.toml", ["fake"], f'\n[environments]\ntensorflow = "{sys.executable}"\n')
    code = main(["run", str(toml), "--out", str(tmp_path / "out"), "--quiet"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert (f"environment tensorflow: not run by this command, so the interpreter {toml}: environments.tensorflow "
            f"names ({sys.executable}) is not used") in printed.out


@pytest.mark.process
def test_resolving_a_framework_reads_the_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's resolution turns the name into a target once; the interpreter's choice is handed the target
    and the class (issue 51: the registry was entered again by the managed environment's lookups)."""
    from tests.helpers.envs import kind
    from tests.helpers.registry import count_lookups

    asked = count_lookups(monkeypatch)
    resolved = resolve_runtimes(["pytorch"], {}, kind())
    assert resolved["pytorch"].interpreter.source == "managed", resolved["pytorch"].interpreter.problem
    assert asked == ["pytorch"]


def _run_without_workers(monkeypatch: pytest.MonkeyPatch, toml: Path, out: Path, *flags: str) -> list[str]:
    """``batchscope run`` of ``toml`` whose trials a stand-in executor answers (no worker: tests/fakes/
    memory_executor.py), and the names the command looked up in the registry, in order."""
    from harness.run import sweep
    from tests.fakes.memory_executor import LinearMemory
    from tests.helpers.registry import count_lookups

    monkeypatch.setattr(sweep, "LocalExecutor", lambda **kw: LinearMemory())
    asked = count_lookups(monkeypatch)
    assert main(["run", str(toml), "--out", str(out), "--quiet", *flags]) == 0
    return asked


def test_a_run_looks_a_plugin_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    """Issue 51: ``run`` reads the registry once for each adapter it names: the experiment's checks (precision, math
    mode, capabilities, its ``[adapters.X]`` table's settings), the resolution and the plan use what that lookup found
    (the plugin was looked up seven times, eight with a variant). A plugin without requirements of its own runs in
    the environment of the built-in whose framework it imports: the built-ins are read to find it, once each."""
    register_fake(monkeypatch)
    toml = _toml(tmp_path / "e.toml", ["fake"], '\n[adapters.fake]\nbehaviour = "ok"\n\n[variants.plain]\n'
                                                 'precision = "fp32"\n\n[variants.sgd]\noptimizer = "sgd"\n')
    asked = _run_without_workers(monkeypatch, toml, tmp_path / "out", "--device", "cpu", "--math-mode", "ieee")
    assert asked[0] == "fake" and asked.count("fake") == 1 and len(asked) == len(set(asked)), asked


@pytest.mark.process
def test_a_run_looks_a_builtin_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    """Issue 51: a ``run`` of a built-in reads the registry once for it (eight times before: the experiment's checks,
    with each override again, the resolution, the plan's default settings)."""
    asked = _run_without_workers(monkeypatch, _toml(tmp_path / "e.toml", ["pytorch"]), tmp_path / "out",
                                 "--repeats", "1")
    assert asked == ["pytorch"]


def test_python_for_a_framework_without_a_table_plans_the_trials_a_run_without_it_plans(tmp_path: Path) -> None:
    """``--python tensorflow=...`` for a file with no ``[adapters.tensorflow]`` table: the same trials (options with
    the adapter's defaults, so the same hashes) as without it; only the interpreter differs. (They were planned with
    no options at all, so the same training was stored under another hash and another setting.)"""
    from harness.config.experiment import load_experiment
    from harness.run.planner import plan
    from tests.helpers.planning import prepared

    exp = load_experiment(_toml(tmp_path / "e.toml", ["tensorflow"]))
    named = exp.with_interpreters({"tensorflow": sys.executable})
    plain, with_python = plan(exp, prepared()), plan(named, prepared())
    assert plain[0].adapter_options, "tensorflow has default options (memory_mode): the case this test is about"
    assert [t.trial_hash for t in with_python] == [t.trial_hash for t in plain]
    assert [dict(t.adapter_options) for t in with_python] == [dict(t.adapter_options) for t in plain]
