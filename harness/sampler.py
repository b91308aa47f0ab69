"""Sampling beside the worker. (The NVML/host sampler thread is built in the sampler issue; until then no
monitor runs and trials carry only the worker's own figures.)"""

from __future__ import annotations

from collections.abc import Callable

from harness.executor import Monitor, TrialUnit
from harness.spec import Experiment


def monitor_factory_for(exp: Experiment) -> tuple[Callable[[TrialUnit], Monitor] | None, str]:
    """(factory of the monitor that watches each trial, a notice to print once)."""
    return None, ""
