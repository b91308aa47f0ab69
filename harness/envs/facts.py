"""``python -m harness.envs.facts TARGET [--import]``: what an interpreter holds for one adapter, as one JSON line.

Run in the framework's interpreter (a managed environment or the user's), never in the parent: the parent learns
the framework's version and build without importing it. Only the standard library and the adapter's (import-light)
module are imported here, unless ``--import`` asks for the framework itself: the check of a user's interpreter,
which must prove the framework imports there, not only that its files are present.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import json
import platform
import sys
from typing import Any


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def facts(target: str, do_import: bool) -> dict[str, Any]:
    """The interpreter, numpy, the adapter's framework (distribution, version, build) and, with ``do_import``, the
    framework's own ``__version__`` after importing it; ``problem`` says what is missing."""
    out: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                           "numpy": _version("numpy"), "problem": None}
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except Exception as e:  # noqa: BLE001 - any failure to load the adapter is this interpreter's problem
        out["problem"] = f"batchscope's adapter {target} cannot be imported there: {type(e).__name__}: {e}"
        return out
    dists = list(getattr(cls, "distributions", ()) or ())
    found = next(((d, v) for d in dists if (v := _version(d))), None)
    out["distribution"], out["framework_version"] = found if found else (dists[0] if dists else None, None)
    import_name = str(getattr(cls, "import_name", "") or "")
    if import_name and importlib.util.find_spec(import_name) is None:
        out["problem"] = f"the framework module {import_name!r} is not installed there"
        return out
    hook = getattr(cls, "gpu_build", None)
    try:
        build = hook() if hook is not None else None
        out["gpu"], out["build"] = (build.gpu, build.label) if build is not None else (None, None)
    except Exception as e:  # noqa: BLE001 - a plugin's build reader failing: its build is unknown
        out["gpu"], out["build"] = None, f"unknown ({type(e).__name__}: {e})"
    if do_import and import_name:
        importer = getattr(cls, "import_framework", None)  # the adapter's own way where it has one (MXNet's patch)
        try:
            module = importer() if callable(importer) else importlib.import_module(import_name)
        except BaseException as e:  # noqa: BLE001 - a framework that fails to import (ImportError, SystemExit...)
            out["problem"] = f"import {import_name} fails there: {type(e).__name__}: {str(e)[:300]}"
            return out
        out["framework_version"] = str(getattr(module, "__version__", "") or out["framework_version"] or "")
        if "numpy" in sys.modules:
            out["numpy"] = str(sys.modules["numpy"].__version__)
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    do_import = "--import" in args
    targets = [a for a in args if a != "--import"]
    if len(targets) != 1:
        print("usage: python -m harness.envs.facts module:Class [--import]", file=sys.stderr)
        return 2
    print(json.dumps(facts(targets[0], do_import)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
