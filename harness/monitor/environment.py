"""The machine a run happened on: CPU, memory, OS, Python and GPUs (through NVML), captured in the parent.

Framework versions are not here: the parent never imports a framework, so they come from each
worker's ``hello`` message and are stored per trial.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import psutil

from harness.errors import ProbeError
from harness.monitor import nvml
from harness.monitor.fields import NO_GPU_NOTICE


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> tuple[list[dict[str, Any]], str]:
    """(GPUs seen by NVML, a note). With no GPU or no driver: ([], "no GPU: running on CPU (...)").

    NVML errors are mapped in :mod:`harness.monitor.nvml`, the one place that knows them; NVML stays
    initialised afterwards (once per process) for the sampler.
    """
    try:
        nvml.ensure_initialised()
        out = nvml.device_facts()
    except ProbeError as e:
        return [], f"{NO_GPU_NOTICE} ({e})"
    note = f"{len(out)} GPU(s): " + ", ".join(g["name"] for g in out) if out else NO_GPU_NOTICE
    return out, note


def capture() -> dict[str, Any]:
    """Facts about this machine, JSON-able."""
    gpu_list, note = gpus()
    first = gpu_list[0] if gpu_list else {}
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpu_list,
        "gpu_name": first.get("name"),
        "gpu_memory_mib": first.get("memory_total_mib"),
        "driver": first.get("driver"),
        "cuda_driver": first.get("cuda_driver"),
        "gpu_note": note,
    }
