"""Which environment a framework's workers need: its lock (or a plugin's requirements), its kind and its name.

An environment is named by what decides its contents: the framework, the kind (``cpu`` or ``cuda``), and a hash of
the lock's requirements (each pin with its hashes; comments left out, so a regenerated lock with the same pins and
files keeps its environment), the interpreter's version and the machine. Change any of them and a new environment is
built beside the old one.

A lock lists every distribution as ``name==version`` followed by the sha256 of each file pip may take for it
(``--hash=sha256:...``, on continuation lines as pip-compile writes them): the builder installs it with pip's
``--require-hashes``, so a changed or substituted wheel is refused instead of installed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError

#: the kinds of lock a built-in framework may have; ``cuda`` is chosen where NVML sees a GPU (or BATCHSCOPE_ENV_KIND)
KINDS = ("cpu", "cuda")
#: overrides the kind for every framework (``make quick GPU=1`` sets it to ``cuda``)
KIND_VAR = "BATCHSCOPE_ENV_KIND"
_COMMENT = re.compile(r"(^|\s+)#.*$")


@dataclass(frozen=True)
class EnvSpec:
    """A managed environment: what it is built from and where it lives.

    ``requirements``: the pip requirement lines (for a lock: one per distribution, ``name==version --hash=...``);
    ``source``: the file they came from, or the adapter's ``requirements`` attribute for a plugin; ``import_name``:
    the module a successful build must import; ``locked``: built from a lock (installed with ``--require-hashes``).
    """

    framework: str
    kind: str
    requirements: tuple[str, ...]
    source: str
    import_name: str
    #: the adapter (``module:Class``) whose framework a build must import (its own way: ``import_framework``)
    target: str = ""
    python_tag: str = f"{sys.implementation.name}{sys.version_info[0]}.{sys.version_info[1]}"
    #: built from a lock with hashes (installed with ``--require-hashes``)
    locked: bool = False
    #: the requirements are the whole set (a lock: installed with ``--no-deps``); False for a plugin's specifiers,
    #: whose dependencies pip resolves at build time (its framework's own: torch's sympy, filelock...)
    complete: bool = True

    @property
    def digest(self) -> str:
        """12 hex digits of the requirements, the interpreter's version and the machine."""
        text = "\n".join([self.python_tag, platform.machine(), *sorted(self.requirements)])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """``pytorch-cpu-1a2b3c4d5e6f``: the folder under the cache's ``envs/``."""
        return f"{self.framework}-{self.kind}-{self.digest}"

    def path(self, root: Path) -> Path:
        return root / self.name

    @property
    def label(self) -> str:
        """How a trial row and ``doctor`` name it: ``managed pytorch-cpu@1a2b3c4d5e6f``."""
        return f"managed {self.framework}-{self.kind}@{self.digest}"


def requirement_lines(text: str) -> tuple[str, ...]:
    """The requirements of a lock or requirements file, one string each: comments and blank lines dropped, a
    requirement continued over several lines (``\\`` at the end, as a lock's ``--hash`` lines are) joined into one
    (``numpy==2.4.6 --hash=sha256:... --hash=sha256:...``)."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = _COMMENT.sub("", raw).strip()  # pip's rule: a comment starts at a '#' at the start or after a space
        continued = line.endswith("\\")
        line = line.rstrip("\\").strip()
        pending = f"{pending} {line}".strip() if line else pending
        if not continued and pending:
            out.append(pending)
            pending = ""
    if pending:
        out.append(pending)
    return tuple(out)


def normal_name(name: str) -> str:
    """A distribution's name as PEP 503 compares names: runs of ``-``, ``_`` and ``.`` as one ``-``, lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> tuple[str, str] | None:
    """(normalised distribution name, pinned version or ``""``) of one requirement line, or None for a line that
    names no distribution (an option such as ``--hash=...`` on a line of its own). Whatever follows the specifier
    (`` --hash=...``, a line continuation, an environment marker) is left out: ``Torch[extra]==2.14.1 \\`` ->
    ``("torch", "2.14.1")``."""
    text = requirement.strip()
    if not text or text.startswith("-"):
        return None
    text = re.split(r"\s|;", text, maxsplit=1)[0]
    name = re.split(r"[\[<>=!~@]", text, maxsplit=1)[0]
    version = text.partition("==")[2] if "==" in text and "===" not in text else ""
    return normal_name(name), version


def pin_of(requirement: str) -> tuple[str, str]:
    """(name, version) of a lock's requirement (``torch==2.13.0+cpu --hash=...`` gives ``("torch", "2.13.0+cpu")``).

    Raises:
        ValueError: the requirement is not an exact pin.
    """
    named = requirement_name(requirement)
    if named is None or not named[0] or not named[1]:
        raise ValueError(f"not an exact pin (name==version): {requirement!r}")
    return named


def hashes_of(requirement: str) -> tuple[str, ...]:
    """The sha256 digests a requirement line carries (``--hash=sha256:HEX``), in their order."""
    return tuple(word.partition("sha256:")[2] for word in requirement.split() if word.startswith("--hash=sha256:"))


def envs_root(cache_dir: Path | None = None) -> Path:
    """Where managed environments live: ``$BATCHSCOPE_ENVS``, else ``envs/`` in the cache."""
    if os.environ.get("BATCHSCOPE_ENVS"):
        return Path(os.environ["BATCHSCOPE_ENVS"])
    from harness.data.prepared import default_cache_dir

    return (cache_dir or default_cache_dir()) / "envs"


def chosen_kind(gpu_present: bool) -> str:
    """``cuda`` where a GPU is present, else ``cpu``; ``$BATCHSCOPE_ENV_KIND`` decides when set.

    Raises:
        ConfigError: the variable names no kind.
    """
    asked = os.environ.get(KIND_VAR, "").strip().lower()
    if asked:
        if asked not in KINDS:
            raise ConfigError(f"{KIND_VAR}={asked!r}: expected one of {', '.join(KINDS)}")
        return asked
    return "cuda" if gpu_present else "cpu"


def lock_dir(adapter_cls: type) -> Path | None:
    """``locks/`` beside the adapter's package (``adapters/pytorch/locks``), where it has one."""
    module = sys.modules.get(adapter_cls.__module__)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    here = Path(file).resolve().parent
    return here / "locks" if (here / "locks").is_dir() else None


def spec_for(framework: str, adapter_cls: type, kind: str) -> EnvSpec | None:
    """The managed environment ``framework`` gets on a machine of ``kind``; None: it runs in the parent's interpreter.

    A built-in framework has locks: ``<kind>.txt``, or ``cpu.txt`` where it has no lock of that kind (MXNet has no
    CUDA lock: its CUDA wheels are retired). A plugin that declares ``requirements`` (pip specifiers) gets an
    environment from them; one that does not, but uses a built-in framework's module, shares that framework's
    (:func:`harness.envs.resolve.interpreter_for` says how its own package is made importable there).
    """
    locks = lock_dir(adapter_cls)
    import_name = str(getattr(adapter_cls, "import_name", "") or "")
    target = f"{adapter_cls.__module__}:{adapter_cls.__qualname__}"
    if locks is not None:
        lock = locks / f"{kind}.txt"
        if not lock.exists():
            lock = locks / "cpu.txt"
        if lock.exists():
            chosen = "cpu" if lock.name == "cpu.txt" else kind
            return EnvSpec(framework, chosen, requirement_lines(lock.read_text()), str(lock), import_name, target,
                           locked=True)
    declared = getattr(adapter_cls, "requirements", None)
    if declared:
        if isinstance(declared, str) or not all(isinstance(r, str) and r.strip() for r in declared):
            raise ConfigError(f"adapter {framework!r}: requirements must be a list of pip requirement strings, "
                              f"got {declared!r}")
        return EnvSpec(framework, kind, tuple(r.strip() for r in declared), f"{adapter_cls.__module__}."
                       f"{adapter_cls.__qualname__}.requirements", import_name, target, complete=False)
    return None
