"""The report's environment section names the nodes a Ray run's trials ran on (issue 23)."""

from __future__ import annotations

from report.document.context import environment_rows, node_rows
from report.load import StoredExperiment


def _row(node: str | None, host: str = "h", gpu: int | None = None, n: int = 1, attempt: int = 1,
         status: str = "ok") -> dict[str, object]:
    return {"node_id": node, "host": host, "device_index": gpu, "concurrent_n": n, "attempt": attempt,
            "status": status, "framework": "pytorch", "batch_size": 4}


def test_a_local_run_has_no_node_rows() -> None:
    exp = StoredExperiment(name="e", runs=(), trials=(_row(None), _row(None)))
    assert node_rows(exp) == []


def test_nodes_are_grouped_with_gpus_packing_and_reruns() -> None:
    trials = (_row("aaaaaaaa11", "cpu1", n=2), _row("aaaaaaaa11", "cpu1", n=2, attempt=2),
              _row("bbbbbbbb22", "gpu1", gpu=0, n=2), _row("bbbbbbbb22", "gpu1", gpu=1, n=2),
              _row("cccccccc33", "cpu2"), _row("cccccccc33", "cpu2", status="lost"))
    rows = dict(node_rows(StoredExperiment(name="e", runs=(), trials=trials)))
    assert rows["Node cpu1 (aaaaaaaa)"] == ("2 trial(s); 2 trials ran concurrently on this node; 1 re-run here "
                                           "after their node died")
    assert rows["Node gpu1 (bbbbbbbb)"] == "2 trial(s) on GPU(s) 0, 1, one GPU each; 2 trials ran concurrently " \
                                          "on this node"
    assert rows["Node cpu2 (cccccccc)"] == "2 trial(s); one trial at a time on this node"
    assert "1 trial(s)" in rows["Lost trials"] and "--resume" in rows["Lost trials"]
    # and they are part of the environment table
    labels = [label for label, _ in environment_rows(StoredExperiment(name="e", runs=(), trials=trials))]
    assert "Node gpu1 (bbbbbbbb)" in labels


def test_the_environment_names_the_gpus_the_trials_used_not_nvmls_first() -> None:
    """Issue 29: a machine with two GPUs whose trials ran on its second one."""
    trials = tuple(_row(None) | {"gpu_used": "GPU 1 (NVIDIA H100 80GB HBM3, GPU-bbbb)"} for _ in range(3))
    exp = StoredExperiment(name="e", runs=(), trials=(*trials, _row(None)))
    rows = dict(environment_rows(exp))
    assert rows["GPU(s) the trials used"] == "GPU 1 (NVIDIA H100 80GB HBM3, GPU-bbbb): 3 trial(s)"
    bare = StoredExperiment(name="e", runs=(), trials=(_row(None),))
    assert "GPU(s) the trials used" not in dict(environment_rows(bare))
