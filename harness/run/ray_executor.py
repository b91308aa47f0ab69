"""Run trial units as tasks on a Ray cluster (``pip install 'batchscope[cluster]'``).

Each unit becomes one Ray task that runs :class:`~harness.run.executor.LocalExecutor` on the node Ray
picks: the worker process, its sampler and the outcome classification all happen on that node,
beside the GPU, exactly as they would locally; only the finished :class:`TrialOutcome` travels back.
A GPU trial asks Ray for one whole GPU, so two trials never share a card, and the CPU trials of a
timing study ask for every CPU of a node slot (``cpus_per_trial``) so they never share cores.

Requirements on the cluster: the same Python environment (batchscope and the frameworks) on every
node, and the output/cache directories on a file system all nodes see (the prepared data set and
the per-trial logs are read and written by path). Ray is not a framework: importing it in the parent
keeps the one-framework-per-process rule.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.records import Monitor, TrialOutcome, TrialUnit
from harness.run.executor import LocalExecutor

#: how long a cluster address may take to answer before the run is refused (ray.init itself retries for
#: minutes: an unreachable --ray-address hung for 10 minutes, and Ctrl-C took ~35 s to get through)
RAY_CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse (ConfigError, exit 2) a ``HOST:PORT`` or ``ray://HOST:PORT`` address that does not accept a TCP
    connection within ``timeout_s``. Other forms (``auto``, ``local``) are left to Ray."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"--ray-address {address}: nothing answers there within {timeout_s:g} s ({e}); check "
                          f"the address with `ray status --address {hostport}` on a cluster node, start a cluster "
                          "with `ray start --head`, or leave --ray-address out for a local one") from e


def _run_unit(unit: TrialUnit, monitor_factory: Callable[[TrialUnit], Monitor] | None,
              log_dir: str | None) -> TrialOutcome:
    """The body of the Ray task: an ordinary local run on the node."""
    return LocalExecutor(monitor_factory=monitor_factory, log_dir=Path(log_dir) if log_dir else None).run(unit)


class RayExecutor:
    """Runs each unit as one Ray task, one at a time (the sweep's order matters for skipping doomed sizes)."""

    def __init__(self, address: str | None = None, monitor_factory: Callable[[TrialUnit], Monitor] | None = None,
                 log_dir: Path | None = None, cpus_per_trial: float = 1.0,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'batchscope[cluster]' "
                              "(or use the default local executor)") from None
        self.ray = ray
        if address and not ray.is_initialized():
            check_reachable(address)
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as e:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {e}; start one with "
                                  "`ray start --head` or leave --ray-address out for a local one") from e
        self.monitor_factory = monitor_factory
        self.log_dir = str(log_dir) if log_dir else None
        self.cpus_per_trial = cpus_per_trial
        self._task = ray.remote(max_retries=0)(_run_unit)

    def run(self, unit: TrialUnit, on_event: Callable[[dict[str, Any]], None] | None = None) -> TrialOutcome:
        """Run ``unit`` on a node with the resources it needs; returns when it has finished.

        ``on_event`` is not called: worker events stay on the node (the outcome carries the phases).
        """
        gpus = 1 if unit.trial.device == "gpu" else 0
        ref = self._task.options(num_cpus=self.cpus_per_trial, num_gpus=gpus).remote(
            unit, self.monitor_factory, self.log_dir)
        return self.ray.get(ref)  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        """Disconnect from (or stop the local) Ray cluster."""
        self.ray.shutdown()
