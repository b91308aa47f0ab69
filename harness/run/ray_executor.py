"""Run trial units as tasks on a Ray cluster (``pip install 'batchscope[cluster]'``), many at once (issue 23).

Each unit becomes one Ray task that runs :class:`~harness.run.executor.LocalExecutor` on the node Ray
picks: the worker process, its sampler and the outcome classification all happen on that node,
beside the GPU, exactly as they would locally; only the finished :class:`TrialOutcome` travels back,
and the driver alone writes the store.

Resources, so that a measurement is what it would be alone:

* a GPU trial asks for one whole GPU (``num_gpus=1``): Ray sets the task's ``CUDA_VISIBLE_DEVICES``, the worker
  inherits it and the sampler watches that device only (harness/monitor/sampler.py); its CPU threads are not
  reserved (``num_cpus=0``), so a node runs as many GPU trials as it has GPUs;
* a CPU trial takes a whole node's CPUs (``num_cpus`` = the node's CPUs, pinned to the node with
  ``NodeAffinitySchedulingStrategy``), so two timed trials never share cores; ``trials_per_node`` > 1 packs more
  (each gets its share of the CPUs), and each row records it (``concurrent_n``).

The sweep's chains run side by side (harness/run/scheduler.py) up to the cluster's slots, ``max_concurrent`` at most.
A task whose node dies is a ``lost`` trial (run again once by the scheduler); a trial's own failure, out of memory
included, is an outcome, never a Ray retry (``max_retries=0``). Ctrl-C cancels every task in flight: the task's
executor kills its worker's process group, then whatever is still running is force-killed.

Requirements on the cluster: the same Python environment (batchscope and the frameworks) on every
node, and the output/cache directories on a file system all nodes see (the prepared data set and
the per-trial logs are read and written by path). Ray is not a framework: importing it in the parent
keeps the one-framework-per-process rule.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from harness.config.trial import TrialSpec
from harness.errors import ConfigError
from harness.records import Monitor, Placement, TrialOutcome, TrialUnit
from harness.run.executor import LocalExecutor
from harness.run.protocol import Message, Phase, Progress

#: how long a cluster address may take to answer before the run is refused (ray.init itself retries for
#: minutes: an unreachable --ray-address hung for 10 minutes, and Ctrl-C took ~35 s to get through)
RAY_CONNECT_TIMEOUT_S = 10.0
#: on Ctrl-C, how long the tasks get to kill their workers (KeyboardInterrupt in the task) before being force-killed
CANCEL_GRACE_S = 10.0
#: the worker messages a node relays to the driver's live display (what it shows: the phase, the step progress)
RELAYED_EVENTS: tuple[type[Message], ...] = (Phase, Progress)  # what the driver's live display reads
#: how often the driver looks for relayed messages while it waits for a trial to finish (seconds)
EVENT_POLL_S = 0.5
#: the most relayed messages held for the driver; beyond it a node drops them (a display's, never a result's)
EVENT_QUEUE_MAX = 10_000


def check_reachable(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse (ConfigError, exit 2) a ``HOST:PORT`` or ``ray://HOST:PORT`` address that does not accept a TCP
    connection within ``timeout_s``. Other forms (``auto``, ``local``) are left to Ray."""
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


def visible_gpu_index(visible: str | None) -> int | None:
    """The index of the first GPU in ``CUDA_VISIBLE_DEVICES`` (the one a framework uses), None if none/by UUID."""
    first = (visible or "").split(",")[0].strip()
    return int(first) if first.isdigit() else None


def _run_unit(unit: TrialUnit, monitor_factory: Callable[[TrialUnit], Monitor] | None, log_dir: str | None,
              gpu: bool, concurrent_n: int, attempt: int, events: Any = None) -> TrialOutcome:
    """The body of the Ray task: an ordinary local run on the node, told where it ran. ``events``: a Ray queue the
    worker's phase and progress messages are put on, for the driver's live display (a message that cannot be put is
    dropped: it is only a display's)."""
    import ray

    relay = None
    if events is not None:
        trial_hash = unit.trial.trial_hash

        def relay(msg: Message) -> None:
            if isinstance(msg, RELAYED_EVENTS):  # typed across the queue: the message dataclasses pickle
                try:
                    events.put_nowait((trial_hash, msg))
                except Exception:  # noqa: BLE001 - a full or gone queue must never fail the trial
                    pass

    outcome = LocalExecutor(monitor_factory=monitor_factory,
                            log_dir=Path(log_dir) if log_dir else None).run(unit, on_event=relay)
    # Ray set CUDA_VISIBLE_DEVICES to the GPU it gave this task: the worker and its sampler saw that one
    device_index = visible_gpu_index(os.environ.get("CUDA_VISIBLE_DEVICES")) if gpu else None
    placement = Placement(host=socket.gethostname(), node_id=ray.get_runtime_context().get_node_id(),
                          device_index=device_index, concurrent_n=concurrent_n, attempt=attempt)
    return dataclasses.replace(outcome, placement=placement)


def _call_on_node(fn: Callable[..., Any], args: tuple[Any, ...], gpu: bool, concurrent_n: int) -> tuple[Any, Placement]:
    """The body of a Ray task that runs ``fn(*args)`` (a max-batch search), told where it ran."""
    import ray

    placement = Placement(host=socket.gethostname(), node_id=ray.get_runtime_context().get_node_id(),
                          device_index=visible_gpu_index(os.environ.get("CUDA_VISIBLE_DEVICES")) if gpu else None,
                          concurrent_n=concurrent_n, attempt=1)
    return fn(*args), placement


@dataclasses.dataclass
class _Node:
    node_id: str
    host: str
    cpus: float
    gpus: float


class RayExecutor:
    """Runs units as Ray tasks: :meth:`backend` runs a sweep's chains side by side; :meth:`run` one unit."""

    def __init__(self, address: str | None = None, monitor_factory: Callable[[TrialUnit], Monitor] | None = None,
                 log_dir: Path | None = None, trials_per_node: int = 1, max_concurrent: int | None = None,
                 init_kwargs: dict[str, Any] | None = None) -> None:
        if trials_per_node < 1:
            raise ConfigError(f"--trials-per-node {trials_per_node}: give 1 or more")
        if max_concurrent is not None and max_concurrent < 1:
            raise ConfigError(f"--max-concurrent {max_concurrent}: give 1 or more")
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
                # no address: a local Ray of this command's own, as --ray-address says, even where `ray start` left
                # a cluster running on this machine (ray.init(None) would join that one; --ray-address auto does);
                # RAY_ADDRESS, Ray's own variable, is still honoured
                ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", **kwargs)
            except ConnectionError as e:
                raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {e}; start one with "
                                  "`ray start --head` or leave --ray-address out for a local one") from e
        self.monitor_factory = monitor_factory
        self.log_dir = str(log_dir) if log_dir else None
        self.trials_per_node = trials_per_node
        self.max_concurrent = max_concurrent
        self._task = ray.remote(max_retries=0, retry_exceptions=False)(_run_unit)
        self._call = ray.remote(max_retries=0, retry_exceptions=False)(_call_on_node)

    def nodes(self) -> list[_Node]:
        """The cluster's live nodes with their CPUs and GPUs (a head started with ``num_cpus=0`` has none)."""
        out = []
        for n in self.ray.nodes():
            if n.get("Alive"):
                res = n.get("Resources") or {}
                out.append(_Node(n["NodeID"], n.get("NodeManagerHostname") or n.get("NodeManagerAddress", ""),
                                 float(res.get("CPU", 0)), float(res.get("GPU", 0))))
        return out

    def wants_gpu(self, trial: TrialSpec) -> bool:
        """Whether ``trial`` takes a GPU: device gpu, or auto on a cluster that has GPUs."""
        return trial.run_device == "gpu" or (trial.run_device == "auto" and any(n.gpus >= 1 for n in self.nodes()))

    def backend(self, units: Callable[[TrialSpec], TrialUnit], trials: Sequence[TrialSpec],
                on_event: Callable[[TrialSpec, Message], None] | None = None) -> RayBackend:
        """The scheduler's backend for one sweep of ``trials`` (harness/run/scheduler.py); ``on_event(trial, msg)``
        is told the running trials' phase and progress messages, relayed from their nodes."""
        return RayBackend(self, units, gpu=bool(trials) and self.wants_gpu(trials[0]), on_event=on_event)

    def run(self, unit: TrialUnit, on_event: Callable[[Message], None] | None = None) -> TrialOutcome:
        """Run one unit on a node with the resources it needs; returns when it has finished (the max-batch search's
        probes, one after another). ``on_event`` is not called: worker events stay on the node."""
        backend = RayBackend(self, lambda trial: unit, gpu=self.wants_gpu(unit.trial))
        handle = backend.submit(unit.trial, 1)
        try:
            return backend.wait([handle])[0][1]
        except BaseException:
            backend.cancel([handle])
            raise

    def map_on_nodes(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
                     gpu: bool) -> list[tuple[Any, Placement] | str]:
        """``fn(*args)`` for each of ``calls`` as Ray tasks side by side, with a trial's resources (a GPU each, or a
        whole CPU node each), as many at once as :meth:`RayBackend.slots` allows: the max-batch searches, one per
        framework. Per call, in order: (its return value, where it ran), or why it has none (its node died, or it
        raised). Ctrl-C cancels every task in flight."""
        backend = RayBackend(self, lambda trial: None, gpu=gpu)  # type: ignore[arg-type,return-value]
        out: dict[int, tuple[Any, Placement] | str] = {}
        pending = list(enumerate(calls))
        running: dict[Any, int] = {}
        try:
            while pending or running:
                while pending and len(running) < backend.slots():
                    i, args = pending.pop(0)
                    if gpu:
                        per_node = max((int(n.gpus) for n in backend.nodes.values()), default=1)
                        ref = self._call.options(num_cpus=0, num_gpus=1).remote(fn, args, True, per_node)
                        node_id = None
                    else:
                        node = backend._free_cpu_node()
                        ref = self._call.options(
                            num_cpus=node.cpus / self.trials_per_node, num_gpus=0,
                            scheduling_strategy=_affinity(node.node_id)).remote(fn, args, False, self.trials_per_node)
                        node_id = node.node_id
                    running[ref] = i
                    backend.in_flight[ref] = (None, 1, node_id)  # type: ignore[assignment]
                if not running:  # no slot left (every node gone): the rest did not run
                    for i, _ in pending:
                        out[i] = "not run: no Ray node with the resources it needs was left; run again with --resume"
                    break
                ready, _ = self.ray.wait(list(running), num_returns=1)
                for ref in ready:
                    i = running.pop(ref)
                    backend.in_flight.pop(ref, None)
                    try:
                        out[i] = self.ray.get(ref)
                    except self.ray.exceptions.RayTaskError as e:
                        out[i] = f"raised on its node: {_first(e)}"
                    except self.ray.exceptions.RayError as e:
                        backend.nodes = {n.node_id: n for n in self.nodes()}
                        out[i] = (f"lost: its Ray node died ({type(e).__name__}); run again with --resume to "
                                  "search again")
        except BaseException:
            backend.cancel(list(running))
            raise
        return [out[i] for i in range(len(calls))]

    def shutdown(self) -> None:
        """Disconnect from (or stop the local) Ray cluster."""
        self.ray.shutdown()


class RayBackend:
    """One sweep's tasks: which node slot each CPU trial holds, and the outcome of each finished task."""

    def __init__(self, executor: RayExecutor, units: Callable[[TrialSpec], TrialUnit], gpu: bool,
                 on_event: Callable[[TrialSpec, Message], None] | None = None) -> None:
        self.ex, self.ray, self.units, self.gpu = executor, executor.ray, units, gpu
        self.nodes = {n.node_id: n for n in executor.nodes()}
        self.in_flight: dict[Hashable, tuple[TrialSpec, int, str | None]] = {}  # ref: (trial, attempt, node id)
        self.on_event = on_event
        self.events: Any = None  # the queue the nodes put their workers' messages on (an actor that needs no CPU)
        if on_event is not None:
            from ray.util.queue import Queue

            # on the driver's own node: a worker node that dies must not take the display's queue with it
            here = self.ray.get_runtime_context().get_node_id()
            self.events = Queue(maxsize=EVENT_QUEUE_MAX,
                                actor_options={"num_cpus": 0, "scheduling_strategy": _affinity(here)})

    def slots(self) -> int:
        """The cluster's slots now (its GPUs, or CPU nodes x trials per node), ``max_concurrent`` at most."""
        if self.gpu:
            cap = int(sum(n.gpus for n in self.nodes.values()))
        else:
            cap = sum(self.ex.trials_per_node for n in self.nodes.values() if n.cpus >= 1)
        return min(cap, self.ex.max_concurrent) if self.ex.max_concurrent else cap

    def _free_cpu_node(self) -> _Node:
        used: dict[str, int] = {}
        for _, _, node in self.in_flight.values():
            if node is not None:
                used[node] = used.get(node, 0) + 1
        free = [n for n in self.nodes.values() if n.cpus >= 1 and used.get(n.node_id, 0) < self.ex.trials_per_node]
        if not free:
            raise RuntimeError("no free CPU node slot: the scheduler started more trials than slots()")
        return min(free, key=lambda n: (used.get(n.node_id, 0), n.host, n.node_id))

    def submit(self, trial: TrialSpec, attempt: int) -> Hashable:
        """Start ``trial`` as a task: a GPU of its own, or its share of a CPU node's cores, pinned there."""
        unit = self.units(trial)
        if self.gpu:
            per_node = max((int(n.gpus) for n in self.nodes.values()), default=1)
            concurrent = min(per_node, self.ex.max_concurrent or per_node)
            ref = self.ex._task.options(num_cpus=0, num_gpus=1).remote(
                unit, self.ex.monitor_factory, self.ex.log_dir, True, concurrent, attempt, self.events)
            node_id = None
        else:
            node = self._free_cpu_node()
            share = node.cpus / self.ex.trials_per_node
            ref = self.ex._task.options(
                num_cpus=share, num_gpus=0,
                scheduling_strategy=_affinity(node.node_id),
            ).remote(unit, self.ex.monitor_factory, self.ex.log_dir, False, self.ex.trials_per_node, attempt,
                     self.events)
            node_id = node.node_id
        self.in_flight[ref] = (trial, attempt, node_id)
        return ref

    def wait(self, handles: list[Hashable]) -> list[tuple[Hashable, TrialOutcome]]:
        """Block until at least one task has finished; each finished task's outcome (``lost`` where its node
        died, ``oom`` where Ray's own memory monitor killed it)."""
        if self.events is None:
            ready, _ = self.ray.wait(handles, num_returns=1)
        else:  # relay the running trials' messages while waiting
            ready = []
            while not ready:
                ready, _ = self.ray.wait(handles, num_returns=1, timeout=EVENT_POLL_S)
                self._relay()
        ready_more, _ = self.ray.wait(handles, num_returns=len(handles), timeout=0)  # any others done meanwhile
        out = []
        for ref in {*ready, *ready_more}:
            trial, attempt, node_id = self.in_flight.pop(ref)
            out.append((ref, self._outcome(ref, trial, attempt, node_id)))
        return out

    def _relay(self) -> None:
        """Pass the messages the nodes have put on the queue to ``on_event``, for trials still in flight."""
        try:
            got = self.events.get_nowait_batch(self.events.qsize())
        except Exception:  # noqa: BLE001 - the queue's actor is gone (its node died): the display goes without
            return
        trials = {t.trial_hash: t for t, _, _ in self.in_flight.values() if t is not None}
        for trial_hash, msg in got:
            if trial_hash in trials and self.on_event is not None:
                self.on_event(trials[trial_hash], msg)

    def _outcome(self, ref: Any, trial: TrialSpec, attempt: int, node_id: str | None) -> TrialOutcome:
        exc = self.ray.exceptions
        where = Placement(node_id=node_id, host=self.nodes[node_id].host if node_id in self.nodes else None,
                          attempt=attempt)
        try:
            return self.ray.get(ref)  # type: ignore[no-any-return]
        except exc.OutOfMemoryError as e:  # Ray's memory monitor killed the task: out of memory, a result
            return TrialOutcome(trial=trial, status="oom", reason=f"killed by Ray's memory monitor: {_first(e)}",
                                placement=where)
        except exc.RayTaskError as e:  # our own code raised on the node: a bug, recorded like a dead worker
            return TrialOutcome(trial=trial, status="crashed", reason=f"the Ray task raised: {_first(e)}",
                                placement=where)
        except exc.RayError as e:  # the node, its raylet or the task's process died: not a result
            self.nodes = {n.node_id: n for n in self.ex.nodes()}  # fewer slots from now on
            return TrialOutcome(trial=trial, status="lost", placement=where,
                                reason=f"the Ray node running it died ({type(e).__name__}: {_first(e)}); "
                                       "run again once on another node, else by --resume")

    def cancel(self, handles: list[Hashable]) -> None:
        """Ctrl-C: interrupt every task (each kills its worker's process group), then force-kill the rest."""
        for ref in handles:
            self.ray.cancel(ref, force=False)
        _, left = self.ray.wait(handles, num_returns=len(handles), timeout=CANCEL_GRACE_S)
        for ref in left:
            self.ray.cancel(ref, force=True)
        for ref in handles:
            self.in_flight.pop(ref, None)


def _affinity(node_id: str) -> Any:
    """Ray's strategy that runs a task on ``node_id`` only (hard: a trial's CPUs are that node's)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[-1][:300] if lines else type(e).__name__
