"""The interpreter a test runs framework code in: the framework's managed environment (harness.envs), as a sweep
would choose it, so that the test process itself never imports a framework (it holds none since 0.2)."""

from __future__ import annotations

import importlib
import sys
from functools import cache

from harness.envs.resolve import managed_interpreter, shared_builtin
from harness.envs.runtime import FrameworkRuntime
from harness.envs.spec import chosen_kind
from harness.monitor.environment import gpus


@cache
def kind() -> str:
    """The lock kind this machine uses (``cpu`` here; ``cuda`` where NVML sees a GPU)."""
    return chosen_kind(bool(gpus()[0]))


@cache
def runtime_for(name: str) -> FrameworkRuntime:
    """Registered adapter ``name`` as a command resolves it: in its framework's managed environment (built on first
    use), for a test that runs a probe or a search of its own (passed explicitly: nothing remembers a choice)."""
    from harness.registry import adapter_target

    interpreter = managed_interpreter(name, kind())
    if interpreter.problem:
        raise RuntimeError(interpreter.problem)
    return FrameworkRuntime(name, adapter_target(name), interpreter)


@cache
def python_for(name: str) -> str:
    """The interpreter that runs adapter ``name`` (a registered name, or ``module:Class``): its framework's managed
    environment (built on first use), or this interpreter for an adapter without one (the fakes)."""
    if ":" not in name:
        interpreter = managed_interpreter(name, kind())
        if interpreter.problem:
            raise RuntimeError(interpreter.problem)
        return interpreter.python
    module, _, class_name = name.partition(":")
    shared = shared_builtin(getattr(importlib.import_module(module), class_name))
    return python_for(shared) if shared else sys.executable
