"""The interpreter each framework's workers run in, chosen once per command before the first trial.

Order: the user's interpreter where one is named (``--python FRAMEWORK=PATH``, ``[environments]`` in the experiment,
or the older ``[adapters.NAME] python``), checked there (the framework imports, its version and build are read,
batchscope's worker code imports); else the framework's managed environment, built on first use; else, for an
adapter with no environment of its own, the parent's interpreter. A plugin that declares no requirements but uses a
built-in framework's module runs in that framework's managed environment with its own package made importable.

batchscope's code reaches a worker through ``PYTHONPATH``: a folder of links to the ``harness`` and ``adapters``
packages (and a plugin's package), so nothing is installed into a user's environment and no other package of the
parent's (its numpy 2, say, beside MXNet's numpy 1.26) leaks into a worker.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.config.experiment import check_interpreter
from harness.envs.build import EnvironmentBuildError, build, is_built, python_in, read_facts, use
from harness.envs.spec import EnvSpec, envs_root, spec_for
from harness.errors import ConfigError
from harness.registry import adapter_class, adapter_target, is_builtin, known_adapter_names

#: the packages every worker imports from batchscope
WORKER_PACKAGES = ("harness", "adapters")
#: how long reading an interpreter's facts may take (a user's TensorFlow import included)
FACTS_TIMEOUT_S = 180.0
_CODE_DIR_LOCK = threading.Lock()


@dataclass(frozen=True)
class Interpreter:
    """Where one framework's workers run.

    ``source``: ``user`` (named by the user), ``managed`` (built from a lock) or ``parent`` (this interpreter).
    ``environment``: how a trial row names it (``managed pytorch-cpu@1a2b3c4d5e6f``, ``user``, ``parent``).
    ``pythonpath``: what the worker needs on ``PYTHONPATH`` to import batchscope's code (and a plugin's).
    ``facts``: the interpreter's versions and the framework's build (:mod:`harness.envs.facts`).
    ``problem``: why the framework cannot run there (a managed environment that failed to build); its trials are
    stored as errors carrying this, and the other frameworks run.
    """

    framework: str
    python: str
    source: str
    environment: str
    pythonpath: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    spec: EnvSpec | None = None
    problem: str | None = None

    def worker_env(self) -> dict[str, str]:
        """``PYTHONPATH`` with batchscope's code, for a process started outside the executor (a benchmark's bare
        loop); nothing for the parent's interpreter. The executor takes :attr:`pythonpath` itself."""
        return {"PYTHONPATH": os.pathsep.join(self.pythonpath)} if self.pythonpath else {}

    def line(self) -> str:
        """One line for ``run``, ``maxbatch`` and ``doctor``: where, which versions, which build."""
        facts = self.facts
        versions = ", ".join(f"{k} {v}" for k, v in (("python", facts.get("python")),
                                                      (facts.get("distribution") or self.framework,
                                                       facts.get("framework_version")),
                                                      ("numpy", facts.get("numpy"))) if v)
        build_label = f"; {facts['build']}" if facts.get("build") else ""
        return f"{self.framework}: {self.environment} ({self.python}; {versions}{build_label})"

    def ensure(self, say: Callable[[str], None] = lambda line: None) -> Interpreter:
        """The same interpreter, its managed environment rebuilt if it was deleted since it was chosen."""
        if self.source != "managed" or self.spec is None or self.problem or Path(self.python).exists():
            return self
        try:
            build(self.spec, Path(self.python).parents[1].parent, self.pythonpath, say)
        except EnvironmentBuildError as e:
            return replace(self, problem=str(e))
        return self


def _code_dir(modules: Iterable[str]) -> Path:
    """A folder of links to ``modules``' top-level packages (or files), made once per set of paths."""
    sources: dict[str, Path] = {}
    for module in modules:
        top = module.partition(".")[0]
        spec = importlib.util.find_spec(top)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            sources[top] = Path(next(iter(spec.submodule_search_locations))).resolve()
        elif spec.origin:
            sources[top + ".py"] = Path(spec.origin).resolve()
    digest = hashlib.sha256(json.dumps(sorted((k, str(v)) for k, v in sources.items())).encode()).hexdigest()[:12]
    folder = envs_root() / "code" / digest
    with _CODE_DIR_LOCK:  # the environments of one command are prepared by threads of one process
        if not _links_hold(folder, sources):
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=folder.parent))
            for name, path in sources.items():
                (tmp / name).symlink_to(path)
            try:
                if folder.exists() and not _links_hold(folder, sources):
                    shutil.rmtree(folder, ignore_errors=True)  # links left dangling or pointing elsewhere
                os.replace(tmp, folder)
            except OSError:  # another process made it first: theirs is the same
                shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _links_hold(folder: Path, sources: Mapping[str, Path]) -> bool:
    """Whether ``folder`` links every name in ``sources`` to that source (a link left dangling does not hold)."""
    return all((folder / name).exists() and (folder / name).resolve() == path for name, path in sources.items())


def read_interpreter_facts(python: str, target: str, pythonpath: tuple[str, ...], do_import: bool
                           ) -> dict[str, Any]:
    """:mod:`harness.envs.facts` run in ``python``; ``problem`` set where it could not run there.

    The current directory is left out of the child's module path (``-P`` where the interpreter has it, else a
    neutral working directory), so that the parent's checkout cannot stand in for the interpreter's own packages.
    """
    env = dict(os.environ)
    inherited = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *([inherited] if inherited else [])])
    cmd = [python, "-m", "harness.envs.facts", target, *(["--import"] if do_import else [])]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=FACTS_TIMEOUT_S, env=env,
                              stdin=subprocess.DEVNULL, cwd=envs_root().parent if envs_root().parent.exists()
                              else "/")
    except subprocess.TimeoutExpired:
        return {"problem": f"reading it took over {FACTS_TIMEOUT_S:.0f} s"}
    except OSError as e:
        return {"problem": f"it cannot be run: {e.strerror or e}"}
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        if not isinstance(facts, dict):
            raise ValueError(facts)
        return facts
    except (ValueError, IndexError):
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-2:])[:400]
        return {"problem": f"batchscope's worker code does not run there (exit {done.returncode}: {tail})"}


def user_interpreter(framework: str, path: str, where: str, target: str | None = None) -> Interpreter:
    """The user's interpreter for ``framework``, checked: refused (ConfigError, exit 2) where it cannot run it.

    ``where``: how the user named it, for the message (``--python`` or the experiment's key). ``target``: the
    adapter's ``module:Class`` where the caller resolved it already (else read from the registry).
    """
    python = check_interpreter(where, path)  # the file itself, as the experiment's reader checks it
    target = target or adapter_target(framework)
    pythonpath = (str(_code_dir([*WORKER_PACKAGES, target.partition(":")[0]])),)
    facts = read_interpreter_facts(python, target, pythonpath, do_import=True)
    if facts.get("problem"):
        raise ConfigError(f"{where}: {framework} cannot run in {python}: {facts['problem']}; install it there, "
                          f"or leave out {where.split(':')[0]} to use batchscope's managed {framework} environment")
    return Interpreter(framework, python, "user", "user", pythonpath, facts)


def shared_builtin(adapter_cls: type) -> str | None:
    """The built-in framework whose module a plugin without requirements uses (``torch`` -> ``pytorch``)."""
    found = _shared_builtin_adapter(adapter_cls)
    return found[0] if found else None


def _shared_builtin_adapter(adapter_cls: type) -> tuple[str, type] | None:
    """:func:`shared_builtin`'s name and class: each built-in is looked up once, until the one found."""
    import_name = str(getattr(adapter_cls, "import_name", "") or "").partition(".")[0]
    for name in sorted(known_adapter_names()):
        if not is_builtin(name):
            continue
        cls = adapter_class(name)
        if str(getattr(cls, "import_name", "")).partition(".")[0] == import_name:
            return name, cls
    return None


def managed_spec(framework: str, kind: str, cls: type | None = None) -> EnvSpec | None:
    """The managed environment ``framework`` runs in: its own lock or requirements, else (a plugin of a built-in
    framework) that framework's; None: the parent's interpreter. ``cls``: its adapter class where the caller loaded
    it already (else read from the registry)."""
    cls = cls or adapter_class(framework)
    spec = spec_for(framework, cls, kind)
    if spec is None and not is_builtin(framework):
        shared = _shared_builtin_adapter(cls)
        spec = spec_for(*shared, kind) if shared else None
    return spec


def managed_interpreter(framework: str, kind: str, say: Callable[[str], None] = lambda line: None,
                        root: Path | None = None, adapter: tuple[str, type] | None = None) -> Interpreter:
    """``framework``'s managed environment (built where it is not yet), or the parent's interpreter for an adapter
    that has none. A failed build is not raised: the interpreter carries it as its ``problem``. ``adapter``: its
    (``module:Class``, class) where the caller resolved them already (else read from the registry).

    The environment is held in use from here to the end of the command (:func:`harness.envs.build.use`, let go by
    :func:`harness.envs.inuse.release_all` when ``batchscope`` returns, or when the process ends): another command
    that would move it aside (a rebuild) waits for this one, a bounded time, and else leaves it in place."""
    target, cls = adapter or (adapter_target(framework), adapter_class(framework))
    spec = managed_spec(framework, kind, cls)
    modules = [*WORKER_PACKAGES, target.partition(":")[0]]  # a plugin's own package too, made importable there
    if spec is None:
        return Interpreter(framework, sys.executable, "parent", "parent")
    root = root or envs_root()
    env_dir = spec.path(root)
    pythonpath = (str(_code_dir(modules)),)
    try:
        use(spec, root, say)  # from here to the command's end: no other command moves it aside (harness.envs.inuse)
        build(spec, root, pythonpath, say)
    except EnvironmentBuildError as e:
        return Interpreter(framework, str(python_in(env_dir)), "managed", spec.label, pythonpath, {}, spec, str(e))
    facts = _cached_facts(env_dir, cls, target, pythonpath)
    if facts.get("problem"):
        return Interpreter(framework, str(python_in(env_dir)), "managed", spec.label, pythonpath, facts, spec,
                           f"{spec.label}: {facts['problem']}")
    return Interpreter(framework, str(python_in(env_dir)), "managed", spec.label, pythonpath,
                       {**read_facts(env_dir), **facts}, spec)


def _cached_facts(env_dir: Path, cls: type, target: str, pythonpath: tuple[str, ...]) -> dict[str, Any]:
    """:func:`read_interpreter_facts` of a managed environment, kept in it: its packages never change (it is named
    by its lock), so the facts change only with the code that reads them (the adapter's module and its build
    reader, and the facts script), whose bytes name the cached copy. Saves a child interpreter per framework on
    every command."""
    sources = [Path(__file__).with_name("facts.py")]
    module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if module_file:
        here = Path(str(module_file))
        sources += [here, *sorted(here.parent.glob("build*.py")), here.parent.parent / "builds.py"]
    digest = hashlib.sha256(target.encode())
    for source in sources:
        try:
            digest.update(source.read_bytes())
        except OSError:
            continue
    cached = env_dir / f"batchscope-facts-{digest.hexdigest()[:12]}.json"
    try:
        data = json.loads(cached.read_text())
        if isinstance(data, dict):
            return data
    except (OSError, ValueError):
        pass
    facts = read_interpreter_facts(str(python_in(env_dir)), target, pythonpath, do_import=False)
    if not facts.get("problem"):
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(facts))
            os.replace(tmp, cached)
        except OSError:  # a read-only cache: read them again next time
            tmp.unlink(missing_ok=True)
    return facts


def existing_managed(framework: str, kind: str, root: Path | None = None) -> tuple[EnvSpec | None, Path | None]:
    """``framework``'s managed environment for ``kind`` and its folder where it is built (``doctor``: no build)."""
    spec = managed_spec(framework, kind)
    if spec is None:
        return None, None
    env_dir = spec.path(root or envs_root())
    return spec, env_dir if is_built(env_dir) else None


def choose(frameworks: Iterable[str], named: Mapping[str, tuple[str, str]], kind: str,
           say: Callable[[str], None] = lambda line: None,
           adapters: Mapping[str, tuple[str, type]] | None = None) -> dict[str, Interpreter]:
    """The interpreter of each of ``frameworks``: ``named`` maps a framework to (its path, where the user named it);
    ``adapters``: each one's (``module:Class``, class) where the caller resolved them (the registry is then not read
    again).
    Returned, never kept: a command holds them in its :class:`harness.envs.runtime.FrameworkRuntime` records, made by
    :func:`harness.envs.runtime.resolve_runtimes` (which also refuses names for frameworks not in the run).

    Raises:
        ConfigError: a named interpreter that cannot run its framework (exit 2, before anything is written).
    """
    frameworks = list(dict.fromkeys(frameworks))
    known = dict(adapters or {})
    out: dict[str, Interpreter] = {}
    for framework in frameworks:  # the user's first: a refusal comes before any build
        if framework in named:
            path, where = named[framework]
            target = known[framework][0] if framework in known else None
            out[framework] = user_interpreter(framework, path, where, target)
    managed = [fw for fw in frameworks if fw not in named]
    if managed:  # built side by side: mostly downloading and unpacking wheels, so they overlap well on 2 cores
        said = threading.Lock()

        def say_whole(line: str) -> None:  # one line at a time: the builders' lines are never run together
            with said:
                say(line)

        with ThreadPoolExecutor(max_workers=min(4, len(managed)), thread_name_prefix="env-build") as pool:
            built = dict(zip(managed, pool.map(
                lambda fw: managed_interpreter(fw, kind, say_whole, adapter=known.get(fw)), managed),
                strict=True))
        out.update(built)
    return {fw: out[fw] for fw in frameworks}
