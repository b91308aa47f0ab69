"""Issues 50 (item 2) and 51 (item 2): a sweep's max-batch search on Ray runs every probe in the framework's runtime
as the command resolved it, its managed environment or the user's ``--python``, although the search runs in a Ray
task, a process of its own that chose nothing (before, it fell back to batchscope's own interpreter, which holds no
framework: every probe failed with ``No module named 'torch'`` and ``run`` still exited 0).

A real local Ray, started here, whose tasks run in Ray's worker processes; the search is PyTorch's, for real.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray  # in the dev extras (batchscope[cluster]): a missing Ray fails these tests rather than skipping them

from harness.cli import main
from harness.envs.resolve import managed_interpreter
from harness.store import Store
from tests.helpers.envs import kind, python_for
from tests.maxbatch.conftest import fixed_threshold

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray of two CPUs whose worker processes inherit the fixed mmap threshold (so the search needs no
    settling runs: tests/maxbatch/conftest.py), joined by ``run --executor ray``."""
    python_for("pytorch")  # the managed environment built before Ray starts (a first build takes minutes)
    with fixed_threshold():
        # "local": a Ray of this module's own, never another test's cluster (test_ray_cluster.py's simulated nodes,
        # in the other xdist worker, are "the latest cluster started" that ray.init() would join)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _experiment(path: Path) -> Path:
    path.write_text('name = "raymb"\nframeworks = ["pytorch"]\nmodel = "tiny_cnn"\nbatch_sizes = [8]\n'
                    'device = "cpu"\nthreads = 1\nwarmup_steps = 1\ntimed_steps = 2\nsynthetic_shape = [3, 64, 64]\n'
                    'synthetic_samples = 512\nmax_batch = true\nmemory_limit_mib = 360\n'
                    'max_batch_granularity = "25%"\neval_points = 0\n')
    return path


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[list[Any], list[Any]]:
    out = tmp_path / "out"
    with fixed_threshold():
        code = main(["run", str(_experiment(tmp_path / "raymb.toml")), "--out", str(out), "--executor", "ray",
                     "--quiet", *extra])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "max batch pytorch:" in printed.out and "fits" in printed.out, printed.out
    with Store.open(out, create=False) as store:
        probes = store.trials("purpose = 'probe'")
        answers = store.maxbatch_answers()
    assert len(answers) == 1 and answers[0].answer.max_batch > 8, answers
    assert probes and all(p.status == "ok" or p.status == "oom" for p in probes), \
        [(p.status, p.reason) for p in probes]
    nodes = {n["NodeID"] for n in ray.nodes()}
    assert all(p.placement.node_id in nodes for p in probes)  # each probe was a Ray task's, not the driver's
    return probes, answers


def test_a_search_on_ray_probes_in_the_managed_environment(local_ray: None, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    probes, _ = _run(tmp_path, capsys)
    managed = managed_interpreter("pytorch", kind())
    assert {p.python for p in probes} == {managed.python}
    assert {p.environment for p in probes} == {managed.environment} and managed.environment.startswith("managed ")
    assert all((p.versions or {}).get("torch") for p in probes if p.status == "ok")  # the framework imported there


def test_a_search_on_ray_probes_in_the_users_interpreter(local_ray: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    user = python_for("pytorch")  # an interpreter that holds torch, named by the user
    probes, _ = _run(tmp_path, capsys, "--python", f"pytorch={user}")
    assert {p.python for p in probes} == {user} and {p.environment for p in probes} == {"user"}
