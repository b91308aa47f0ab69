"""What a command knows about one framework, as one value: :class:`FrameworkRuntime` (issue 51).

A command resolves each framework it runs once, here (:func:`resolve_runtimes`): the adapter registered under the
name (its ``module:Class``, loaded and checked once), the interpreter its workers run in (the user's, the managed
environment or the parent's: :mod:`harness.envs.resolve`), the build found there, and, once the devices are
resolved, the device. The record is immutable and picklable, and it is handed down explicitly: to the sweep's units,
to a max-batch search and its probes, into a Ray task. Nothing keeps it in a module-level variable, so a process
that did not make it (a Ray node) runs what the command chose, not what its own empty memory would choose
(STYLE.md, habit 12).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.envs.resolve import Interpreter, choose
from harness.errors import ConfigError
from harness.records import TrialUnit
from harness.registry import Registered, adapter_target, load_adapter, lookup_each

if TYPE_CHECKING:
    from adapters.base import Adapter
    from harness.config.trial import TrialSpec
    from harness.data.prepared import PreparedData


@dataclass(frozen=True)
class FrameworkRuntime:
    """One framework as a command resolved it.

    ``framework``: the registered name (what trials, the store and the report say). ``adapter_target``: the
    adapter's ``module:Class``, as the worker imports it. ``interpreter``: where its workers run
    (:class:`~harness.envs.resolve.Interpreter`: python, source, environment, code path, facts, managed spec,
    problem). ``device``: ``cpu`` or ``gpu`` once the command resolved it, None before.
    """

    framework: str
    adapter_target: str
    interpreter: Interpreter
    device: str | None = None

    @property
    def adapter_class(self) -> type[Adapter]:
        """The adapter class (its module imported here, never its framework): loaded from :attr:`adapter_target`,
        so a Ray node loads the class the driver resolved, whatever its own registry holds."""
        return load_adapter(self.adapter_target, self.framework)

    @property
    def build(self) -> str | None:
        """The framework's build in :attr:`interpreter` as read there (``CPU only``, ``CUDA 12.4``), None unknown."""
        label = self.interpreter.facts.get("build")
        return str(label) if label else None

    @property
    def oom_patterns(self) -> tuple[str, ...]:
        """What the adapter's framework prints on stderr when it runs out of memory."""
        return tuple(self.adapter_class.oom_stderr_patterns)

    def gpu_build(self) -> tuple[bool | None, str]:
        """(can its build use a GPU: True / False / None for unknown, the build in words): read in the interpreter
        its workers run in (managed or the user's); for an adapter that runs in this interpreter, from its
        distributions' metadata here (:meth:`adapters.base.Adapter.gpu_build`)."""
        if self.interpreter.source != "parent":
            if not self.build:
                return None, "its build is unknown to batchscope" + (" (its environment could not be built)"
                                                                     if self.interpreter.problem else "")
            gpu = self.interpreter.facts.get("gpu")
            return (gpu if isinstance(gpu, bool) else None), str(self.build)
        hook = getattr(self.adapter_class, "gpu_build", None)  # a duck-typed plugin may lack it
        found = hook() if hook is not None else None
        if found is None:
            return None, "its build is unknown to batchscope"
        return found.gpu, found.label

    def worker_env(self, options: Mapping[str, Any], device: str) -> dict[str, str]:
        """The environment the adapter needs for ``options`` before its framework is imported (PyTorch's CUDA
        allocator settings: :meth:`adapters.base.Adapter.worker_env`); none for a plugin without the hook."""
        if not options:
            return {}
        hook = getattr(self.adapter_class, "worker_env", None)
        return dict(hook(options, device)) if hook is not None else {}

    def unit(self, trial: TrialSpec, data: PreparedData, order_path: str, os_memory_limit_mib: float | None = None,
             env: Mapping[str, str] | None = None) -> TrialUnit:
        """The unit that runs ``trial`` here (a sweep's trial, a max-batch probe): the interpreter, its code path
        and environment, the adapter, its out-of-memory patterns, and why it cannot run where its environment could
        not be built."""
        it = self.interpreter
        return TrialUnit(trial=trial, data=data, order_path=order_path, adapter_target=self.adapter_target,
                         python=it.python, oom_patterns=self.oom_patterns, os_memory_limit_mib=os_memory_limit_mib,
                         env=dict(env or {}), pythonpath=it.pythonpath, environment=it.environment, env_spec=it.spec,
                         unavailable=it.problem)

    def usable(self) -> FrameworkRuntime:
        """This runtime, where its workers can run; BatchscopeError (exit 1) where its environment could not be built
        (a command that runs nothing else, ``maxbatch``; a sweep stores its trials as errors instead)."""
        if self.interpreter.problem:
            from harness.errors import BatchscopeError

            raise BatchscopeError(f"{self.framework}'s environment could not be built: {self.interpreter.problem}")
        return self

    def on(self, device: str) -> FrameworkRuntime:
        """The same runtime with its device resolved."""
        return replace(self, device=device)

    def line(self) -> str:
        """One line for ``run`` and ``maxbatch``: where it runs, which versions, which build (or why it cannot)."""
        if self.interpreter.problem:
            return (f"{self.framework}: its environment could not be built, so its trials are stored as errors: "
                    f"{self.interpreter.problem.splitlines()[0]}")
        return self.interpreter.line()


def unchecked_runtime(framework: str, python: str | None = None) -> FrameworkRuntime:
    """``framework`` in this interpreter, or in ``python`` taken as given (not checked, no code path): for a test
    or a benchmark that runs a unit or a search without a command's resolution. A command uses
    :func:`resolve_runtimes`."""
    here = not python or python == sys.executable
    interpreter = Interpreter(framework, python or sys.executable, "parent" if here else "user",
                              "parent" if here else "user")
    return FrameworkRuntime(framework, adapter_target(framework), interpreter)


#: how a flag names an interpreter (``--python pytorch``): an interpreter named there for a framework not run is
#: refused; one named in an experiment file (which may serve runs of other frameworks, ``--frameworks``) is said
FLAG = "--python"


def unused_interpreters(named: Mapping[str, tuple[str, str]], frameworks: Iterable[str]) -> list[str]:
    """Lines naming the interpreters an experiment file names for frameworks this command does not run (issue 50,
    item 6: said, not ignored without a word; the file may serve runs that narrow its frameworks).

    Raises:
        ConfigError: an interpreter named on the command line (``--python``) for a framework not run (exit 2,
            before anything is built or written): the user would believe that framework ran there.
    """
    runs = list(dict.fromkeys(frameworks))
    lines = []
    for fw, (path, where) in named.items():
        if fw in runs:
            continue
        if where.startswith(FLAG):
            raise ConfigError(f"{where}={path}: {fw!r} is not run by this command (it runs "
                              f"{', '.join(runs) or 'nothing'}); leave --python {fw}=... out, or run {fw} too")
        lines.append(f"{fw}: not run by this command, so the interpreter {where} names ({path}) is not used")
    return lines


def resolve_runtimes(frameworks: Iterable[str], named: Mapping[str, tuple[str, str]], kind: str | None,
                     say: Callable[[str], None] = lambda line: None,
                     registered: Mapping[str, Registered] | None = None, gpu_present: bool = False
                     ) -> dict[str, FrameworkRuntime]:
    """Each of ``frameworks`` resolved once: its adapter loaded (AdapterError, exit 2, before anything is built;
    ``registered``: looked up already, by a command that checked its request against the class first), then its
    interpreter chosen (:func:`harness.envs.resolve.choose`: the user's where ``named`` maps it to (path, where it
    was named), checked there; else its managed environment of ``kind``, built on first use). ``kind`` None: the
    kind this machine takes (``gpu_present``: whether NVML sees a GPU; :func:`harness.envs.guard.managed_kind`:
    ``cuda`` asked for where it sees none is ConfigError, exit 2, nothing downloaded).

    An interpreter named for a framework not in ``frameworks`` is refused where ``--python`` named it and said
    (``say``) where an experiment file did (:func:`unused_interpreters`).

    Raises:
        ConfigError: ``--python`` for a framework not in ``frameworks``, or an interpreter that cannot run its
            framework (exit 2, nothing written).
        AdapterError: a registered adapter that cannot be loaded.
    """
    frameworks = list(dict.fromkeys(frameworks))
    for line in unused_interpreters(named, frameworks):
        say(line)
    named = {fw: how for fw, how in named.items() if fw in frameworks}
    # the registry, once per framework; a registered adapter that cannot be loaded is refused before any build
    found = lookup_each(frameworks, registered)
    adapters = {fw: found[fw] for fw in frameworks}
    if kind is None:
        from harness.envs.guard import managed_kind

        kind = managed_kind([fw for fw in frameworks if fw not in named], gpu_present,
                            adapters={fw: a.cls for fw, a in adapters.items()})
    interpreters = choose(frameworks, named, kind, say, {fw: (a.target, a.cls) for fw, a in adapters.items()})
    return {fw: FrameworkRuntime(fw, adapters[fw].target, interpreters[fw]) for fw in frameworks}


def parse_python_options(values: Iterable[str], source: str = "--python") -> dict[str, str]:
    """``["pytorch=/venv/bin/python", ...]`` as a mapping; each framework named once.

    Raises:
        ConfigError: a value without ``FRAMEWORK=PATH``, or a framework named twice.
    """
    out: dict[str, str] = {}
    for value in values:
        name, sep, path = str(value).partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ConfigError(f"{source} {value!r}: expected FRAMEWORK=PATH, e.g. {source} "
                              "pytorch=/opt/venv/bin/python")
        if name in out:
            raise ConfigError(f"{source}: {name!r} is named twice ({out[name]!r} and {path!r}); name it once")
        out[name] = path
    return out


def flag_interpreters(values: Iterable[str]) -> dict[str, tuple[str, str]]:
    """The interpreters ``--python FRAMEWORK=PATH`` names, as :func:`resolve_runtimes` takes them (path, how it was
    named). ConfigError (exit 2): a value without ``FRAMEWORK=PATH``, or a framework named twice."""
    return {fw: (path, f"{FLAG} {fw}") for fw, path in parse_python_options(values, FLAG).items()}


def command_runtimes(frameworks: Iterable[str], named: Mapping[str, tuple[str, str]], gpu_present: bool,
                     say: Callable[[str], None], registered: Mapping[str, Registered] | None = None
                     ) -> dict[str, FrameworkRuntime]:
    """A command's frameworks resolved (:func:`resolve_runtimes`) with the kind of managed environment this machine
    takes (``cuda`` where NVML sees no GPU: ConfigError, exit 2, nothing downloaded: harness.envs.guard), and one line
    per framework said: where it runs, which versions and build, or why it cannot."""
    runtimes = resolve_runtimes(frameworks, named, None, say, registered, gpu_present)
    for runtime in runtimes.values():
        say(runtime.line())
    return runtimes
