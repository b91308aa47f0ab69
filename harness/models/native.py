"""Native models: a framework's own model, for a network that exists only in that framework.

``[adapters.pytorch] native_model = "package.module:function"`` names a factory ``(input_shape, classes)``
that returns a ``torch.nn.Module`` giving ``(N, classes)`` logits for ``(N, C, H, W)`` input. The adapter
trains it with the experiment's optimizer and loss; its parameter count is the framework's own. Trials of
such a model carry the model name ``native:package.module:function``, so the store and the report say
what ran, and no comparison across frameworks is claimed: there is no shared description, and no shared
initial weights. (``batchscope maxbatch --model native:package.module:function`` says the same on the
command line.)

The parent never imports the factory's module (it imports a framework): it only checks the name and that
the module's top-level package can be found, from the current directory or ``sys.path``. The worker, whose
``PYTHONPATH`` carries the parent's current directory, imports it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

from harness.errors import ConfigError

PREFIX = "native:"


def is_native_model(name: str) -> bool:
    """Whether a trial's model is a framework's own (``native:package.module:function``)."""
    return name.startswith(PREFIX)


def native_name(factory: str) -> str:
    """The model name of the trials that run ``factory``."""
    return PREFIX + factory


def check_factory(factory: str, where: str) -> None:
    """Refuse a malformed or unfindable factory name in the parent, without importing it."""
    module, _, attr = factory.partition(":")
    parts = [*module.split("."), *attr.split(".")]
    if not module or not attr or not all(p.isidentifier() for p in parts):
        raise ConfigError(f"{where}: {factory!r} is not \"package.module:function\" (a function that returns the "
                          "framework's own model for (input_shape, classes))")
    top = module.partition(".")[0]
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top) is not None  # top level only: a submodule would run its package
    except (ImportError, ValueError):
        found = False
    finally:
        if added:
            sys.path.remove(cwd)
    if not found:
        raise ConfigError(f"{where}: module {top!r} of {factory!r} cannot be found from the current directory "
                          f"({cwd}) or PYTHONPATH; install it or run from the directory that holds it")


def load_factory(factory: str) -> Any:
    """Import the factory (in a worker only: its module imports a framework)."""
    module_name, _, attr = factory.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target
