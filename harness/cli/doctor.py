"""``batchscope doctor``: what this machine can run, and what would break a sweep, without importing a framework."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
import sys
from pathlib import Path
from typing import Any

from harness.monitor import environment
from harness.registry import list_adapters

#: (distribution, predicate on the version tuple, what to do when it fails)
PIN_RULES = (
    ("numpy", lambda v: v < (2,), "MXNet 1.9.1 needs numpy < 2: pip install -c constraints.txt 'numpy==1.26.4'"),
    ("pandas", lambda v: v < (3,), "pandas 3 needs numpy >= 2, which breaks MXNet: pip install 'pandas<3'"),
)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _constraints() -> dict[str, str]:
    path = Path(__file__).resolve().parents[2] / "constraints.txt"
    pins: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def pin_problems() -> list[str]:
    """Installed versions that break a supported framework or differ from constraints.txt."""
    problems = []
    mxnet_installed = _installed("mxnet") is not None
    for dist, ok, fix in PIN_RULES:
        version = _installed(dist)
        if version and mxnet_installed and not ok(_version_tuple(version)):
            problems.append(f"{dist} {version}: {fix}")
    pins = _constraints()
    for dist in ("torch", "tensorflow-cpu", "mxnet", "numpy", "pandas", "nvidia-ml-py"):
        version = _installed(dist)
        want = pins.get(dist)
        if version and want and version.split("+")[0] != want:
            problems.append(f"{dist} {version} differs from constraints.txt ({want}): the measured-together "
                            "set is `make test` / pip install -c constraints.txt")
    return problems


def _installed(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def build_words(framework: str, gpu_present: bool) -> tuple[str, str | None]:
    """(the installed build in words, a note when a GPU is present that the build cannot use), from the adapter's
    :meth:`~adapters.base.Adapter.gpu_build` (the distributions' metadata; no framework is imported)."""
    from harness.run.devices import build_of

    try:
        gpu, label = build_of(framework)
    except Exception as e:  # noqa: BLE001 - a broken plugin's metadata must not stop the rest of the report
        return f"unknown ({type(e).__name__}: {e})", None
    if gpu_present and gpu is False:
        return label, (f"a GPU is present, but this {framework} build cannot use it: under device = \"auto\" it runs "
                       "on the CPU, and a run beside frameworks on the GPU is refused; install its GPU build "
                       "(README, \"On a GPU machine\") or leave it out with --frameworks")
    if gpu_present and gpu is None:
        return label, "a GPU is present; whether this build can use it is not known before it runs"
    return label, None


def run_doctor() -> int:
    """Print the report; exit 0 when nothing is wrong, 1 when a pin problem was found."""
    print(f"batchscope  python {platform.python_version()} ({sys.executable})")
    print(f"platform    {platform.platform()}")
    env = environment.capture()
    print(f"cpu         {env['cpu_model']} x {env['cpu_count']}, {env['ram_gib']} GiB RAM")
    print(f"gpu         {env['gpu_note']}")
    for gpu in env["gpus"]:
        print(f"            #{gpu['index']} {gpu['name']}: {gpu['memory_total_mib']:.0f} MiB, driver {gpu['driver']}, "
              f"CUDA {gpu['cuda_driver']}")
    print("frameworks")
    for a in list_adapters():
        state = (f"{a.distribution} {a.version}" if a.installed
                 else f"not installed (pip install 'batchscope[{a.name}]')")
        print(f"  {a.name:<11} {state}" + (f"  PROBLEM: {a.problem}" if a.problem else ""))
        if a.installed and not a.problem:
            build, note = build_words(a.name, bool(env["gpus"]))
            print(f"  {'':<11} build: {build}")
            if note:
                print(f"  {'':<11} NOTE: {note}")
    problems = pin_problems()
    if problems:
        print("pin problems")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("pins        ok")
    return 0


# ---------------------------------------------------------------- doctor
def cmd_doctor(args: argparse.Namespace) -> int:
    from harness.cli.doctor import run_doctor

    return run_doctor()


def register(sub: Any) -> None:
    """Add the ``doctor`` subcommand."""
    p = sub.add_parser("doctor", help="check Python, frameworks, pins and GPUs")
    p.set_defaults(func=cmd_doctor)
