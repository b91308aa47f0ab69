"""One device per comparison: ``device = "auto"`` resolved per framework in the parent, before the first trial.

Each adapter says what its installed build can use (:meth:`adapters.base.Adapter.gpu_build`, read from the
distributions' metadata, no framework imported); with the GPUs NVML sees, that decides where each framework's
trials run. A run whose frameworks would land on different devices (PyTorch on the GPU beside ``tensorflow-cpu``)
is refused unless ``allow_mixed_devices`` asks for it (issue 29, item 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.envs.runtime import FrameworkRuntime
from harness.errors import ConfigError

#: the fix printed with a refused mixed-device run
MIXED_FIX = ("install the frameworks' GPU builds (README, \"On a GPU machine\"), or leave the CPU-only ones out "
             "with --frameworks, or set device = \"cpu\" for all; or allow it with --allow-mixed-devices "
             "(allow_mixed_devices = true), and every table and verdict then compares within one device only")


@dataclass(frozen=True)
class ResolvedDevice:
    """Where one framework's trials run: ``device`` is ``cpu`` or ``gpu``; ``why`` says what decided it."""

    framework: str
    device: str
    why: str

    def line(self) -> str:
        """``tensorflow on the CPU: CPU only (tensorflow-cpu 2.21.0 is installed), beside a GPU it cannot use``."""
        return f"{self.framework} on the {'GPU' if self.device == 'gpu' else 'CPU'}: {self.why}"


def build_of(runtime: FrameworkRuntime) -> tuple[bool | None, str]:
    """(can its build use a GPU: True / False / None for unknown, the build in words): the build in the interpreter
    the command chose for the framework (its managed environment or the user's, read there); for an adapter that
    runs in this interpreter, read here (:meth:`harness.envs.runtime.FrameworkRuntime.gpu_build`)."""
    return runtime.gpu_build()


def resolve(runtime: FrameworkRuntime, requested: str, gpu_present: bool, gpu_note: str = "") -> ResolvedDevice:
    """Where ``runtime``'s framework's trials run under ``device = requested`` on a machine that has a GPU or not.

    Raises:
        ConfigError: ``device = "gpu"`` for a build that is CPU only.
    """
    framework = runtime.framework
    if requested == "cpu":
        return ResolvedDevice(framework, "cpu", "device = \"cpu\" was asked for")
    gpu, label = build_of(runtime)
    if requested == "gpu":
        if gpu is False:
            raise ConfigError(f"device = \"gpu\" was asked for, but the installed {framework} is {label}: install "
                              "its GPU build (README, \"On a GPU machine\"), or use device = \"cpu\"")
        return ResolvedDevice(framework, "gpu", f"device = \"gpu\" was asked for; {label}")
    if not gpu_present:
        note = gpu_note.split(" — ")[0] if gpu_note.startswith("no GPU") else f"no GPU: {gpu_note or 'NVML sees none'}"
        return ResolvedDevice(framework, "cpu", f"{note}; {label}")
    if gpu is False:
        return ResolvedDevice(framework, "cpu", f"{label}, beside a GPU it cannot use")
    if gpu is None:
        return ResolvedDevice(framework, "gpu", f"{label}: assumed to use the GPU; its trials fail if it cannot")
    return ResolvedDevice(framework, "gpu", label)


def resolve_experiment(runtimes: Sequence[FrameworkRuntime], requested: Iterable[str], gpu_present: bool,
                       gpu_note: str = "") -> dict[tuple[str, str], ResolvedDevice]:
    """Each (framework, device asked for) of a run (an experiment's variants may ask for different devices)."""
    return {(rt.framework, req): resolve(rt, req, gpu_present, gpu_note) for req in dict.fromkeys(requested)
            for rt in runtimes}


def check_one_device(devices: Mapping[str, str], allow_mixed: bool, source: str) -> None:
    """Refuse frameworks that would run on different devices (``devices``: framework -> ``cpu`` / ``gpu``),
    unless ``allow_mixed``.

    Raises:
        ConfigError: more than one device, not allowed.
    """
    used = sorted(set(devices.values()))
    if len(used) <= 1 or allow_mixed:
        return
    by = "; ".join(f"{d}: {', '.join(sorted(fw for fw, dev in devices.items() if dev == d))}" for d in used)
    raise ConfigError(f"{source}: the frameworks would run on different devices ({by}), and a comparison across "
                      f"them would measure the device, not the framework; {MIXED_FIX}")
