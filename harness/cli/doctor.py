"""``batchscope doctor``: what this machine can run, and what would break a sweep, without importing a framework."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
import sys
from pathlib import Path
from typing import Any

from harness.envs.spec import chosen_kind, envs_root
from harness.monitor import environment
from harness.registry import known_adapter_names

#: the parent's own distributions compared with constraints.txt (the frameworks are in their own environments)
PARENT_PINNED = ("numpy", "pandas", "pyarrow", "nvidia-ml-py", "psutil", "rich")


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
    """The parent's installed versions that differ from constraints.txt (the set measured to work together)."""
    problems = []
    pins = _constraints()
    for dist in PARENT_PINNED:
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
    print_environments(sorted(known_adapter_names()), chosen_kind(bool(env["gpus"])), bool(env["gpus"]))
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


def print_environments(frameworks: list[str], kind: str, gpu_present: bool = False) -> None:
    """Each framework's environment: where, built or not, the lock it follows, versions, CPU or CUDA build."""
    from harness.envs.build import python_in, read_facts
    from harness.envs.resolve import WORKER_PACKAGES, _code_dir, existing_managed, read_interpreter_facts
    from harness.errors import AdapterError
    from harness.registry import adapter_target

    print(f"frameworks  (each in an environment of its own; locks of kind {kind!r}: `batchscope env build` builds "
          "them ahead, `run` and `maxbatch` on first use)")
    for name in frameworks:
        try:
            spec, built = existing_managed(name, kind)
        except AdapterError as e:
            print(f"  {name:<11} PROBLEM: {e}")
            continue
        if spec is None:
            print(f"  {name:<11} the parent's interpreter ({sys.executable}): the adapter declares no environment")
            from harness.envs.runtime import unchecked_runtime
            from harness.run.devices import build_of

            try:
                gpu, words = build_of(unchecked_runtime(name))  # the parent's interpreter: its build read here
            except Exception as e:  # noqa: BLE001 - a broken plugin's metadata must not stop the rest of the report
                gpu, words = None, f"unknown ({type(e).__name__}: {e})"
            label, note = _build_note(name, gpu, words, gpu_present)
            print(f"  {'':<11} build: {label}")
            if note:
                print(f"  {'':<11} NOTE: {note}")
            continue
        print(f"  {name:<11} {spec.label}: lock {spec.source}")
        if built is None:
            print(f"  {'':<11} not built yet ({spec.path(envs_root())}): built on first use, or now with "
                  f"`batchscope env build {name}`")
            continue
        recorded = read_facts(built)
        target = adapter_target(name)
        facts = read_interpreter_facts(str(python_in(built)), target,
                                       (str(_code_dir([*WORKER_PACKAGES, target.partition(":")[0]])),), False)
        versions = ", ".join(f"{k} {v}" for k, v in (("python", facts.get("python") or recorded.get("python")),
                                                     (facts.get("distribution") or name,
                                                      facts.get("framework_version")),
                                                     ("numpy", facts.get("numpy") or recorded.get("numpy"))) if v)
        print(f"  {'':<11} built: {built} ({versions})")
        if facts.get("problem"):
            print(f"  {'':<11} PROBLEM: {facts['problem']}")
            continue
        label, note = _build_note(name, facts.get("gpu"), str(facts.get("build") or "unknown"), gpu_present)
        print(f"  {'':<11} build: {label}")
        if note:
            print(f"  {'':<11} NOTE: {note}")


def _build_note(framework: str, gpu: bool | None, label: str, gpu_present: bool) -> tuple[str, str | None]:
    """(the build in words, a note when a GPU is present that the build cannot use)."""
    if gpu_present and gpu is False:
        return label, (f"a GPU is present, but this {framework} build cannot use it: under device = \"auto\" it runs "
                       "on the CPU, and a run beside frameworks on the GPU is refused; build its CUDA environment "
                       "(BATCHSCOPE_ENV_KIND=cuda, README \"On a GPU machine\") or leave it out with --frameworks")
    if gpu_present and gpu is None:
        return label, "a GPU is present; whether this build can use it is not known before it runs"
    return label, None
