"""Issue 32: a chaos soak, in the manner of Ray's own chaos tests. A long sweep of the fake adapter's trials runs
while workers, nodes and the driver are killed at random moments (a seeded schedule), and is resumed until it is
done; at the end every trial is stored exactly once, no ``lost`` row is left, no worker is left running, and the
store passes ``PRAGMA integrity_check``.

The sweep is the command a user runs (``batchscope run``, in a process of its own, the fake adapter registered as
tests/faults/launch.py does), on the local executor or, with ``--ray``, on a simulated Ray cluster of this machine
(``ray.cluster_utils.Cluster``: a head that runs nothing and ``--nodes`` 1-CPU nodes, as tests/run/test_ray_cluster.py
builds it). The schedule is drawn from ``--seed``: after each gap (exponential, mean ``--mean-gap-s``) one of

* ``worker``: SIGKILL a trial's worker (that trial is a ``crashed`` row: a final result, stored once);
* ``driver``: SIGKILL the ``batchscope run`` process itself (its worker must die by itself), then ``--resume``;
* ``node`` (``--ray`` only): remove a worker node (its trial is ``lost``, run again), and add a fresh one.

Only processes descended from this one are ever signalled. Prints one JSON line: trials, kills by kind, resumes,
wall time, and the end checks.

    nice -n 10 .venv/bin/python benchmarks/chaos_soak.py --trials 300 --seed 1
    nice -n 10 .venv/bin/python benchmarks/chaos_soak.py --trials 200 --seed 2 --ray --nodes 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the fake adapter, registered for the command as the fault tests register it (no framework starts)
FAKE_ADAPTERS = "fake=tests.fakes.adapter:FakeAdapter"
#: how long a worker may outlive a killed driver (docs/reliability.md: "within ~2 s")
ORPHAN_GRACE_S = 5.0


def experiment(directory: Path, trials: int) -> Path:
    """``trials`` trials of the fake adapter: batch sizes 1..k x 10 repeats (k = trials / 10), ~0.4 s of steps."""
    sizes = max(trials // 10, 1)
    repeats = -(-trials // sizes)
    path = directory / "soak.toml"
    path.write_text(f"""name = "soak"
frameworks = ["fake"]
model = "tiny_cnn"
dataset = "synthetic"
synthetic_shape = [1, 8, 8]
synthetic_samples = 64
synthetic_classes = 3
batch_sizes = {list(range(1, sizes + 1))}
repeats = {repeats}
warmup_steps = 1
timed_steps = 1
threads = 1
device = "cpu"
eval = false
skip_larger_after_oom = false
timeout_s = 120

[adapters.fake]
behaviour = "slow_steps"
""")
    return path


def _processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process this user can read."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = (ppid, f.read())
        except (OSError, IndexError, ValueError):
            continue
    return found


def descendant_workers(root: int | None = None) -> list[int]:
    """The ``harness.run.worker`` processes descended from ``root`` (default: this process)."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root or os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if b"harness.run.worker" in procs[child][1]:
                out.append(child)
    return out


def _wait_gone(root: int, grace_s: float, ignore: frozenset[int] = frozenset()) -> list[int]:
    """The workers descended from ``root`` still alive after ``grace_s``, less ``ignore`` (those that were there
    before the soak began: a test process may have others, which are not the soak's to judge)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        left = [pid for pid in descendant_workers(root) if pid not in ignore]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in descendant_workers(root) if pid not in ignore]


class Cluster:
    """A simulated Ray cluster on this machine: a head that runs nothing and ``nodes`` 1-CPU nodes."""

    def __init__(self, nodes: int) -> None:
        from ray import cluster_utils

        self.c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        self.nodes = [self.c.add_node(num_cpus=1) for _ in range(nodes)]
        self.c.wait_for_nodes()
        self.address = self.c.address

    def replace_one(self, rng: random.Random) -> None:
        """Remove a random worker node (as if it died) and add a fresh one, so the capacity stays."""
        node = self.nodes.pop(rng.randrange(len(self.nodes)))
        self.c.remove_node(node)
        self.nodes.append(self.c.add_node(num_cpus=1))
        self.c.wait_for_nodes()

    def shutdown(self) -> None:
        self.c.shutdown()


def _store_checks(out: Path, trials: int) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute("SELECT framework, batch_size, repeat, status FROM trials").fetchall()
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    cells = [(f, b, r) for f, b, r, _ in rows]
    statuses: dict[str, int] = {}
    for *_, status in rows:
        statuses[status] = statuses.get(status, 0) + 1
    return {"rows": len(rows), "distinct_trials": len(set(cells)), "planned": trials, "statuses": statuses,
            "stored_exactly_once": len(rows) == len(set(cells)) == trials,
            "lost_left": statuses.get("lost", 0), "integrity": integrity}


def _done(out: Path, trials: int) -> bool:
    path = out / "results.sqlite"
    if not path.is_file():
        return False
    try:
        checks = _store_checks(out, trials)
    except sqlite3.Error:
        return False
    return bool(checks["rows"] == trials and checks["lost_left"] == 0)


def soak(work: Path, trials: int, seed: int, ray_nodes: int = 0, mean_gap_s: float = 2.0,
         max_rounds: int = 400) -> dict[str, Any]:
    """Run the soak in ``work``; the summary (see the module)."""
    rng = random.Random(seed)
    exp, out = experiment(work, trials), work / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BATCHSCOPE_CACHE=str(work / "cache"),
               BATCHSCOPE_TEST_ADAPTERS=FAKE_ADAPTERS)
    cluster = Cluster(ray_nodes) if ray_nodes else None
    actions = ("worker", "driver") + (("node",) if cluster else ())
    kills = {a: 0 for a in actions}
    missed, resumes, runs, orphans, late = 0, 0, 0, 0, 0
    before = frozenset(descendant_workers())  # not the soak's: e.g. a test process's other children
    t0 = time.monotonic()
    try:
        while not _done(out, trials) and runs < max_rounds:
            args = ["run", str(exp), "--out", str(out), "--quiet"] + (["--resume"] if runs else [])
            if cluster:
                args += ["--ray-address", cluster.address, "--max-concurrent", str(ray_nodes)]
            resumes += bool(runs)
            runs += 1
            with open(work / "driver.log", "ab") as log:
                driver = subprocess.Popen([sys.executable, "-m", "tests.faults.launch", *args], cwd=ROOT, env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            while driver.poll() is None:
                gap, action = rng.expovariate(1 / mean_gap_s), rng.choice(actions)  # the seeded schedule
                try:
                    driver.wait(timeout=gap)
                    break  # the run ended before the next event: resumed above if it is not done
                except subprocess.TimeoutExpired:
                    pass
                if action == "worker":
                    workers = descendant_workers(driver.pid) or [w for w in descendant_workers() if w not in before]
                    if workers:
                        os.kill(rng.choice(sorted(workers)), signal.SIGKILL)
                        kills["worker"] += 1
                    else:
                        missed += 1
                elif action == "driver":
                    driver.send_signal(signal.SIGKILL)
                    driver.wait()
                    kills["driver"] += 1
                    late += _done(out, trials)  # killed after it stored the last trial: nothing left to resume
                    orphans += len(_wait_gone(os.getpid(), ORPHAN_GRACE_S, before))  # its worker must die by itself
                elif cluster is not None:
                    cluster.replace_one(rng)
                    kills["node"] += 1
            driver.wait()
    finally:
        if cluster is not None:
            cluster.shutdown()
    left = _wait_gone(os.getpid(), ORPHAN_GRACE_S, before)
    checks = _store_checks(out, trials) if (out / "results.sqlite").is_file() else {}
    return {"mode": f"ray, {ray_nodes} nodes" if cluster else "local", "trials": trials, "seed": seed,
            "kills": kills, "kills_missed": missed, "resumes": resumes,
            "driver_kills_after_done": late, "wall_s": round(time.monotonic() - t0, 1),
            "orphans_after_driver_kills": orphans, "workers_left": len(left), **checks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ray", action="store_true", help="run on a simulated Ray cluster (kills nodes too)")
    ap.add_argument("--nodes", type=int, default=2, help="worker nodes of the simulated cluster (--ray)")
    ap.add_argument("--mean-gap-s", type=float, default=2.0, help="mean time between two kills")
    ap.add_argument("--work", type=Path, help="working directory (default: a temporary one, removed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chaos-soak-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = soak(work, args.trials, args.seed, args.nodes if args.ray else 0, args.mean_gap_s)
    print(json.dumps(result))
    ok = result.get("stored_exactly_once") and not result.get("lost_left") and result.get("integrity") == "ok" \
        and not result["workers_left"] and not result["orphans_after_driver_kills"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
