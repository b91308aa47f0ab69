"""Sweeps on a simulated multi-node Ray cluster, as Ray tests itself (issue 23): ``ray.cluster_utils.Cluster``
with a head that runs nothing, two 1-CPU nodes and a node with two fake GPUs, all on this machine.

The trials are the fake adapter's (tests/fakes/adapter.py): the tests are about where and how many trials run at
once, which nodes they name, and what happens when a node dies, not about a framework.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import ray  # in the dev extras (batchscope[cluster]): a missing Ray fails these tests rather than skipping them
from ray import cluster_utils

from harness.config.experiment import parse_experiment
from harness.run.executor import LocalExecutor
from harness.run.listener import SweepListener
from harness.run.protocol import Phase, Progress
from harness.run.sweep import SweepOptions, run_sweep, unit_for
from harness.store import Store
from tests.conftest import make_trial
from tests.fakes.registry import register_fake

pytestmark = [pytest.mark.slow,  # Ray with simulated nodes: make test-all (tests/tiers.py)
              pytest.mark.heavy("harness/run/", "harness/envs/", "harness/monitor/")]

#: compared between the cluster's run and the serial one: everything but timings and placement
SAME_COLUMNS = ("trial_hash", "framework", "batch_size", "repeat", "seed", "status", "param_count", "accuracy",
                "eval_loss", "lr")


@pytest.fixture(scope="module")
def cluster() -> Any:
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    cpu_nodes = [c.add_node(num_cpus=1) for _ in range(2)]
    gpu_node = c.add_node(num_cpus=0, num_gpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.cpu_nodes, c.gpu_node = cpu_nodes, gpu_node  # type: ignore[attr-defined]
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def executor(cluster: Any, tmp_path: Path) -> Any:
    from harness.run.ray_executor import RayExecutor

    return RayExecutor(log_dir=tmp_path / "logs")  # Ray is initialised already: joins the cluster


def _experiment(name: str, repeats: int = 2, timed_steps: int = 5) -> Any:
    # 2 sizes x 2 repeats = 4 trials in 2 chains (one per repeat); slow_steps: 0.2 s a step
    return parse_experiment({"name": name, "frameworks": ["fake"], "batch_sizes": [2, 4], "repeats": repeats,
                             "model": "tiny_cnn", "dataset": "synthetic", "synthetic_shape": [1, 8, 8],
                             "synthetic_samples": 32, "warmup_steps": 1, "timed_steps": timed_steps, "threads": 1,
                             "device": "cpu", "adapters": {"fake": {"behaviour": "slow_steps"}}}, source="inline")


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    with Store.open(out) as store:
        return {r["trial_hash"]: r for r in store.trials()}


def test_a_four_trial_sweep_runs_two_at_a_time_one_per_node(cluster: Any, executor: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            cache_dir: Path) -> None:
    register_fake(monkeypatch)
    exp = _experiment("twonodes")
    events: dict[str, list[Any]] = {}

    class Record(SweepListener):
        def on_trial_message(self, trial: Any, msg: Any) -> None:
            events.setdefault(trial.trial_hash, []).append(msg)

    result = run_sweep(exp, tmp_path / "ray", SweepOptions(cache_dir=cache_dir, executor=executor), Record())
    assert result.peak_in_flight == 2 and result.not_run == 0
    rows = _rows(tmp_path / "ray")
    # each trial's phases and step progress came back from its node for the live display, to its last step
    assert set(events) == set(rows)
    for msgs in events.values():
        progress = [m for m in msgs if isinstance(m, Progress)]  # typed, as the worker sent them, across Ray's queue
        assert progress and progress[-1].step == progress[-1].steps_total, msgs
        assert {m.phase for m in msgs if isinstance(m, Phase)} >= {"timed"}, msgs
    cpu_ids = {n.node_id for n in cluster.cpu_nodes}
    assert len(rows) == 4
    for row in rows.values():  # every row names its node; a CPU trial had its node's CPU to itself
        assert row["node_id"] in cpu_ids and row["host"]
        assert (row["concurrent_n"], row["attempt"], row["device_index"]) == (1, 1, None)
    assert {r["node_id"] for r in rows.values()} == cpu_ids  # both nodes were used
    # rows equal a serial run's apart from timings and placement
    serial = run_sweep(exp, tmp_path / "serial", SweepOptions(cache_dir=cache_dir, executor=LocalExecutor()))
    assert serial.peak_in_flight == 1
    local = _rows(tmp_path / "serial")
    assert {h: tuple(r[c] for c in SAME_COLUMNS) for h, r in rows.items()} == \
        {h: tuple(r[c] for c in SAME_COLUMNS) for h, r in local.items()}
    assert all(r["node_id"] is None and r["concurrent_n"] == 1 for r in local.values())


def test_gpu_trials_each_get_a_gpu_of_their_own(cluster: Any, executor: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, tiny_data: Any) -> None:
    """Two GPU trials at once on the node with two (fake) GPUs: Ray gives each its own CUDA_VISIBLE_DEVICES, and
    the row records the index the worker saw."""
    register_fake(monkeypatch)
    # 0.2 s a step for 20 steps: the two overlap even where Ray starts the second task's worker seconds late (in CI
    # two 3-step trials did not: the first had finished, and its GPU 0 was free for the second)
    trials = [make_trial(batch_size=b, device="gpu", model="tiny_cnn", timed_steps=20,
                         adapter_options={"behaviour": "slow_steps"}) for b in (2, 4)]
    units = {t.trial_hash: unit_for(_experiment("gpu"), t, tiny_data) for t in trials}
    backend = executor.backend(lambda t: units[t.trial_hash], trials)
    assert backend.gpu and backend.slots() == 2
    handles = [backend.submit(t, 1) for t in trials]
    outcomes = []
    while handles:
        for h, o in backend.wait(handles):
            handles.remove(h)
            outcomes.append(o)
    assert sorted(o.placement.device_index for o in outcomes) == [0, 1]
    assert {o.placement.node_id for o in outcomes} == {cluster.gpu_node.node_id}
    assert all(o.placement.concurrent_n == 2 for o in outcomes)


def test_a_node_removed_mid_sweep_loses_its_trial_which_runs_again(cluster: Any, executor: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   cache_dir: Path) -> None:
    """A third CPU node joins, takes a trial, and is removed while that trial runs: the trial is stored ``lost``,
    then re-run on a node that is left; in the end each trial has exactly one row, none lost."""
    from harness.run.ray_executor import RayBackend

    register_fake(monkeypatch)
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    submitted: list[str] = []
    real_submit = RayBackend.submit
    removed = threading.Event()

    def submit(self: RayBackend, trial: Any, attempt: int) -> Any:
        ref = real_submit(self, trial, attempt)
        node = self.in_flight[ref][2]
        submitted.append(node)
        if node == doomed.node_id and not removed.is_set():  # once its worker is well under way, the node goes
            removed.set()
            threading.Timer(3.0, cluster.remove_node, (doomed,)).start()
        return ref

    monkeypatch.setattr(RayBackend, "submit", submit)
    written: list[tuple[str, str, int]] = []
    exp = _experiment("lostnode", repeats=3, timed_steps=25)  # 3 chains on 3 nodes; a trial takes ~6 s
    relayed: set[str] = set()  # the live display's messages keep coming through a node's death

    class Record(SweepListener):
        def on_trial_complete(self, i: int, n: int, o: Any) -> None:
            written.append((o.trial.trial_hash, o.status, o.placement.attempt))

        def on_trial_message(self, trial: Any, msg: Any) -> None:
            relayed.add(trial.trial_hash)

    result = run_sweep(exp, tmp_path, SweepOptions(cache_dir=cache_dir, executor=executor), Record())
    assert removed.is_set(), f"no trial went to the node that was to be removed: {submitted}"
    lost = [w for w in written if w[1] == "lost"]
    assert len(lost) == 1  # its row was written, then replaced by the re-run's
    rows = _rows(tmp_path)
    assert len(rows) == 6 and {r["status"] for r in rows.values()} == {"ok"}
    assert rows[lost[0][0]]["attempt"] == 2 and rows[lost[0][0]]["node_id"] != doomed.node_id
    assert result.not_run == 0
    assert relayed == set(rows)


def test_max_batch_searches_run_side_by_side_one_node_each(cluster: Any, executor: Any) -> None:
    """map_on_nodes (the max-batch searches, one per framework): both calls are submitted before either is waited
    for, each takes a whole CPU node, so the two run on the two nodes at once."""
    import os

    answers = executor.map_on_nodes(os.getpid, [(), ()], gpu=False)
    assert all(not isinstance(a, str) for a in answers), answers
    assert {p.node_id for _, p in answers} == {n.node_id for n in cluster.cpu_nodes}
    assert len({pid for pid, _ in answers}) == 2


def _workers_of_tasks_logging_in(directory: Path) -> set[int]:
    """PIDs of trial workers (``-m harness.run.worker``) whose parent (the Ray task's process, running a
    LocalExecutor) has a file under ``directory`` open: the workers of this test's tasks, not another test's."""
    import os

    procs: dict[int, tuple[int, str]] = {}
    holders = set()
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                procs[pid] = (ppid, f.read().decode(errors="replace"))
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(directory)) for fd in fds):
                holders.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    return {pid for pid, (ppid, cmd) in procs.items() if ppid in holders and "harness.run.worker" in cmd}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ctrl_c_cancels_every_task_and_kills_their_workers(cluster: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, tiny_data: Any) -> None:
    """Two trials that would hang for an hour, one per node; cancel (what Ctrl-C does) leaves no worker behind."""
    import time

    from harness.run.ray_executor import RayExecutor

    register_fake(monkeypatch)
    logs = tmp_path / "logs"
    executor = RayExecutor(log_dir=logs)
    trials = [make_trial(batch_size=b, model="tiny_cnn", adapter_options={"behaviour": "hang"}) for b in (2, 4)]
    units = {t.trial_hash: unit_for(_experiment("hang"), t, tiny_data) for t in trials}
    backend = executor.backend(lambda t: units[t.trial_hash], trials)
    handles = [backend.submit(t, 1) for t in trials]
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline:  # both workers are up
        time.sleep(0.5)
        workers |= _workers_of_tasks_logging_in(logs)
    assert len(workers) == 2
    backend.cancel(handles)
    deadline = time.monotonic() + 30
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(map(_alive, workers))


def test_a_trial_on_a_node_runs_in_its_managed_environment_built_there_from_the_same_lock(
        cluster: Any, executor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_data: Any) -> None:
    """Issue 38, item 9: the unit carries its environment's spec; a node that lacks the environment (here: a new
    folder of environments, nothing built in it) builds it from the same lock before starting the worker."""
    from harness.envs.resolve import managed_interpreter
    from harness.records import TrialUnit
    from tests.fakes.env_adapters import NumpyEnvAdapter

    monkeypatch.setenv("BATCHSCOPE_ENVS", str(tmp_path / "envs"))
    eps = {"npenv": "tests.fakes.env_adapters:NumpyEnvAdapter"}
    import importlib.metadata as md

    from harness import registry

    real = dict(registry._entry_points())
    monkeypatch.setattr(registry, "_entry_points", lambda: {**real, **{
        n: md.EntryPoint(name=n, value=v, group=registry.GROUP) for n, v in eps.items()}})
    chosen = managed_interpreter("npenv", "cpu")  # built here, on the driver
    assert chosen.problem is None
    import shutil

    shutil.rmtree(Path(chosen.python).parents[1])  # the node's copy is missing: it must build it itself
    trial = make_trial(framework="npenv", batch_size=2, model="tiny_cnn", timed_steps=2,
                       adapter_options={"behaviour": "ok"})
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(trial.seed, trial.epochs)),
                     adapter_target=f"{NumpyEnvAdapter.__module__}:NumpyEnvAdapter", python=chosen.python,
                     env={"BATCHSCOPE_ENVS": str(tmp_path / "envs")}, pythonpath=chosen.pythonpath,
                     environment=chosen.environment, env_spec=chosen.spec)
    backend = executor.backend(lambda t: unit, [trial])
    handle = backend.submit(trial, 1)
    (done,) = [o for _, o in backend.wait([handle])]
    assert done.status == "ok", (done.reason, done.stderr_tail)
    assert done.placement.node_id in {n.node_id for n in cluster.cpu_nodes}
    assert done.environment == chosen.environment and done.python == chosen.python and Path(chosen.python).exists()
