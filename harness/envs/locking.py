"""``python -m harness.envs.locking``: each framework's lock files resolved anew from their ``.in`` files
(``make locks``).

A lock is the exact set pip resolves for ``adapters/<framework>/locks/<kind>.in``: every distribution with ``==``,
numpy included. CPU locks are resolved with this machine's pip configuration (which serves its CPU torch wheel);
CUDA locks with none (``--isolated``: PyPI alone) for Linux x86-64 wheels of this interpreter's version, since they
are meant for a GPU machine, not this one. Nothing is installed: pip's ``--dry-run --report`` is read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: the manylinux tags a CUDA lock is resolved for: glibc 2.17 to 2.39 on x86-64 (PyPI's wheels use several)
LINUX_X86_64 = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)) + ("manylinux2014_x86_64",
                                                                                       "linux_x86_64")


def platform_flags(python_version: str) -> list[str]:
    """pip flags that resolve binary wheels for Linux x86-64 and CPython ``python_version`` (``3.11``)."""
    flags = ["--isolated", "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in LINUX_X86_64:
        flags += ["--platform", tag]
    return flags


def resolve(requirements: Path, kind: str, python_version: str) -> list[tuple[str, str]]:
    """(name, version) of every distribution pip would install for ``requirements``."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "-r", str(requirements)]
        if kind == "cuda":
            cmd += [*platform_flags(python_version), "--target", str(Path(tmp) / "target")]
        subprocess.run(cmd, check=True)
        data = json.loads(report.read_text())
    pins = {(i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"]) for i in data["install"]}
    return sorted(pins)


def lock_text(framework: str, kind: str, source: Path, pins: list[tuple[str, str]], python_version: str) -> str:
    """The lock file: a header saying what it is and how it was made, then one ``name==version`` per line."""
    today = datetime.date.today().isoformat()
    header = [f"# batchscope lock: {framework}, {kind}. Exact versions resolved by pip for CPython {python_version} "
              f"on Linux x86-64 ({today})",
              f"# from {source.name}; regenerate with `make locks` (docs/environments.md). The managed environment "
              "is named by a hash of these lines."]
    # a local version label (torch 2.13.0+cpu) is left out: pip takes the local CPU wheel where its configuration
    # serves one and the same release from PyPI elsewhere, and the label is not on PyPI
    return "\n".join(header + [f"{name}=={version.split('+')[0]}" for name, version in pins]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.envs.locking", description=__doc__)
    parser.add_argument("frameworks", nargs="*", help="the frameworks to lock (default: every built-in)")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2] / "adapters"
    for inputs in sorted(root.glob("*/locks/*.in")):
        framework, kind = inputs.parent.parent.name, inputs.stem
        if args.frameworks and framework not in args.frameworks:
            continue
        pins = resolve(inputs, kind, args.python_version)
        out = inputs.with_suffix(".txt")
        out.write_text(lock_text(framework, kind, inputs, pins, args.python_version))
        print(f"{out.relative_to(root.parent)}: {len(pins)} distributions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
