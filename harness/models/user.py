"""Your own model: ``model = "package.module:function"``, a function ``(input_shape, classes) -> ModelDescription``.

The function is imported and called once per run, in a child process bounded in time and memory
(:mod:`harness.models.sandbox`: whatever your code does, exit, crash, hang or allocate without end, is an error
naming the model, and batchscope is untouched), and the description it returns travels to every worker as data
(:meth:`ModelDescription.to_spec`), so the workers never import your code and every framework builds the very
same layers. The description must be framework-free (one framework per process, and each adapter builds the
description itself), so while your module is imported and your function runs, importing a framework is refused:
the module-level ``import torch`` of a model file is named in the error. A model that exists only in one
framework is a native model instead (an adapter setting; docs/models.md).

The module is looked up on ``sys.path`` with the current directory first, as ``python -m`` does, so
``mymodels.py`` beside you is found without installing it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.errors import ConfigError
from harness.models.description import ModelDescription

#: frameworks no adapter is registered for, refused all the same (their add-ons, such as torchvision or gluoncv,
#: import a registered framework and are refused through it)
NO_ADAPTER_FRAMEWORKS = frozenset({"paddle", "oneflow"})


@functools.cache
def framework_modules() -> frozenset[str]:
    """Top-level modules a model description must not import: every registered adapter's framework
    (:func:`harness.registry.framework_modules`, from each adapter's ``import_name``) and a few without one."""
    from harness.registry import framework_modules as registered  # lazily: a description alone needs no registry

    return registered() | NO_ADAPTER_FRAMEWORKS


def is_user_model(name: str) -> bool:
    """Whether ``name`` names a function (``module:function``) rather than a catalogue entry."""
    return ":" in name


class _FrameworkBlocker(importlib.abc.MetaPathFinder):
    """Refuses the import of a framework while a user's model code runs, and remembers which one."""

    def __init__(self) -> None:
        self.blocked: list[str] = []
        self.frameworks = framework_modules()  # read before the blocker is installed: it imports adapter modules

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.frameworks:
            self.blocked.append(fullname)
            raise ImportError(f"batchscope: importing {fullname!r} is not allowed while a model description is "
                              "built in the parent", name=fullname)
        return None


@contextlib.contextmanager
def _guarded(name: str) -> Iterator[_FrameworkBlocker]:
    """Block framework imports and put the current directory on ``sys.path``, both undone afterwards."""
    blocker = _FrameworkBlocker()
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    sys.meta_path.insert(0, blocker)
    if added:
        sys.path.insert(0, cwd)
    try:
        yield blocker
    finally:
        sys.meta_path.remove(blocker)
        if added:
            sys.path.remove(cwd)


def _framework_refusal(name: str, what: str) -> ConfigError:
    return ConfigError(f"model {name!r}: {what}; a described model must be framework-free: it is described once, "
                       "outside every framework's process, and each adapter builds it. Describe it with "
                       "harness.models layers only (docs/models.md), or, for a model that exists in one framework "
                       "only, name a factory as that adapter's native_model setting")


def split_name(name: str) -> tuple[str, str]:
    """``package.module:function`` as (module, function), or a :class:`ConfigError` saying the form."""
    module, _, attr = name.partition(":")
    parts = [*module.split("."), *attr.split(".")]
    if not module or not attr or not all(p.isidentifier() for p in parts):
        raise ConfigError(f"model {name!r} is not \"package.module:function\" (dotted names of a module and of "
                          "a function in it, e.g. \"mymodels:small_resnet\")")
    return module, attr


def _import(name: str, module_name: str) -> types.ModuleType:
    with _guarded(name) as blocker:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            if blocker.blocked:
                raise _framework_refusal(name, f"importing {module_name!r} imports the framework module "
                                               f"{blocker.blocked[0]!r}") from None
            raise ConfigError(f"model {name!r}: module {module_name!r} cannot be imported ({e}); it must be "
                              f"importable from the current directory ({os.getcwd()}) or PYTHONPATH, or be "
                              "installed in this environment") from None
        except MemoryError:  # the sandbox's memory limit: said as such (harness/models/sandbox.py)
            raise
        except Exception as e:  # any error in the user's module is reported, never a traceback
            raise ConfigError(f"model {name!r}: importing {module_name!r} failed: {type(e).__name__}: {e}; "
                              "fix the module and run again") from e
    return module


def _framework_attributes(module: types.ModuleType) -> list[str]:
    """Framework modules a user's module holds (imported earlier, so the import hook could not see them)."""
    found = []
    for value in vars(module).values():
        mod_name = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else \
            getattr(value, "__module__", "") or ""
        if isinstance(mod_name, str) and mod_name.partition(".")[0] in framework_modules():
            found.append(mod_name)
    return sorted(set(found))


def load_user_factory(name: str) -> Callable[..., Any]:
    """The function ``name`` points at, imported with framework imports refused."""
    module_name, attr = split_name(name)
    module = _import(name, module_name)
    held = _framework_attributes(module)
    if held:
        raise _framework_refusal(name, f"module {module_name!r} uses the framework module(s) {', '.join(held)}")
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"model {name!r}: module {module_name!r} has no {attr!r} "
                              f"(its file: {getattr(module, '__file__', '?')})")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"model {name!r}: {attr!r} is a {type(target).__name__}, not a function "
                          "(input_shape, classes) -> ModelDescription")
    return target  # type: ignore[no-any-return]


def check_user_model(name: str) -> None:
    """Refuse a malformed name, or one whose module cannot be found, without running any of the user's code: the
    module is imported, and the function called, once, in a child process
    (:func:`harness.models.sandbox.describe_user_model`)."""
    module_name, _ = split_name(name)
    top = module_name.partition(".")[0]
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top) is not None  # the top level only: a package's submodule would run it
    except (ImportError, ValueError):
        found = False
    finally:
        if added:
            sys.path.remove(cwd)
    if not found:
        raise ConfigError(f"model {name!r}: module {module_name!r} cannot be imported (no module {top!r} in the "
                          f"current directory, {cwd}, or on PYTHONPATH); install it or run from the directory that "
                          "holds it")


def describe_here(name: str, input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """Import the user's module, call the function for this input and check what it returns, in this process
    (the sandbox's child; never the parent)."""
    factory = load_user_factory(name)
    with _guarded(name) as blocker:
        try:
            desc = factory(tuple(input_shape), classes)
        except ImportError as e:
            if blocker.blocked:
                raise _framework_refusal(name, f"calling it imports the framework module {blocker.blocked[0]!r}"
                                         ) from None
            raise ConfigError(f"model {name!r}: calling it failed: ImportError: {e}") from e
        except (ConfigError, MemoryError):
            raise
        except Exception as e:  # any error in the user's function is reported, never a traceback
            raise ConfigError(f"model {name!r}: calling it with input_shape={tuple(input_shape)}, classes={classes} "
                              f"failed: {type(e).__name__}: {e}") from e
    if not isinstance(desc, ModelDescription):
        raise ConfigError(f"model {name!r} returned a {type(desc).__module__}.{type(desc).__qualname__}, not a "
                          "harness.models.ModelDescription (for a framework's own model use native_model)")
    if tuple(desc.input_shape) != tuple(input_shape) or desc.classes != classes:
        raise ConfigError(f"model {name!r} describes input {tuple(desc.input_shape)} and {desc.classes} classes, "
                          f"but the data has {tuple(input_shape)} and {classes}: pass the function's "
                          "input_shape and classes arguments through to ModelDescription")
    if desc.output_shape != (classes,):
        raise ConfigError(f"model {name!r} ends in shape {desc.output_shape}, not ({classes},) logits; end it "
                          "with Dense(classes) (after Flatten or GlobalAvgPool)")
    return desc
