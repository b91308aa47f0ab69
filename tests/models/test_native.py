"""Native models: ``[adapters.pytorch] native_model = "module:function"``, the framework's own model."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.models import build_description
from harness.store import Store

TORCH_NET = """
import torch


def small_net(input_shape, classes):
    c, h, w = input_shape
    return torch.nn.Sequential(torch.nn.Conv2d(c, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * h * w, classes))


def wrong_shape(input_shape, classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, classes + 1))
"""


def _module(root: Path, name: str) -> str:
    (root / f"{name}.py").write_text(textwrap.dedent(TORCH_NET))
    return name


BASE = {"name": "n", "frameworks": ["pytorch"], "batch_sizes": [2]}


def test_the_setting_is_checked_in_the_parent_without_importing_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = _module(tmp_path, "torchnets_parse")
    exp = parse_experiment(BASE | {"adapters": {"pytorch": {"native_model": f"{module}:small_net"}}})
    assert exp.model_for("pytorch") == f"native:{module}:small_net"
    assert module not in sys.modules  # checked, never imported: it imports torch
    with pytest.raises(ConfigError, match="'nosuchpkg_q' of 'nosuchpkg_q:net' cannot be found"):
        parse_experiment(BASE | {"adapters": {"pytorch": {"native_model": "nosuchpkg_q:net"}}})
    with pytest.raises(ConfigError, match="is not \"package.module:function\""):
        parse_experiment(BASE | {"adapters": {"pytorch": {"native_model": "just_a_name"}}})
    with pytest.raises(ConfigError, match="has no setting 'native_model'"):
        parse_experiment(BASE | {"frameworks": ["mxnet"], "adapters": {"mxnet": {"native_model": f"{module}:x"}}})
    with pytest.raises(ConfigError, match="is one framework's own model"):
        parse_experiment(BASE | {"frameworks": ["pytorch", "mxnet"], "model": f"native:{module}:small_net"})
    with pytest.raises(ConfigError, match="no framework-neutral description"):
        build_description(f"native:{module}:small_net", (3, 8, 8), 3)


@pytest.mark.slow
def test_sweep_and_maxbatch_run_a_native_pytorch_model(tmp_path: Path, cache_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # the factory's module is found from here, by the parent's check and the worker
    module = _module(tmp_path, "torchnets_run")
    toml = tmp_path / "n.toml"
    toml.write_text('name = "n"\nframeworks = ["pytorch"]\nbatch_sizes = [4]\nsynthetic_shape = [3, 8, 8]\n'
                    'synthetic_samples = 16\nsynthetic_classes = 3\nwarmup_steps = 1\ntimed_steps = 2\n'
                    f'device = "cpu"\nthreads = 1\n\n[adapters.pytorch]\nnative_model = "{module}:small_net"\n')
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out)]) == 0
    assert main(["maxbatch", "--framework", "pytorch", "--model", f"native:{module}:small_net", "--device", "cpu",
                 "--synthetic-shape", "3,8,8", "--threads", "1", "--memory-limit-mib", "4000", "--settle-steps", "20",
                 "--max-batch-cap", "2", "--out", str(out / "mb")]) == 0  # 2 workers: 2, confirm 2
    text = capsys.readouterr().out
    assert "native model (the framework's own): no forecast" in text
    torch_count = 3 * 4 * 9 + 4 + 4 * 8 * 8 * 3 + 3  # Conv2d + Linear, as torch counts them
    with Store.open(out, create=False) as store:
        rows = store.trials()
    assert {(r["status"], r["model"], r["param_count"]) for r in rows} == {
        ("ok", f"native:{module}:small_net", torch_count)}
    with Store.open(out / "mb", create=False) as store:
        row = store.maxbatch_results()[0]
    maxbatch_count = 3 * 4 * 9 + 4 + 4 * 8 * 8 * 10 + 10  # maxbatch's synthetic data has 10 classes
    assert (row["max_batch"], row["param_count"], row["formula_analytic_batch"]) == (2, maxbatch_count, None)


@pytest.mark.slow
def test_a_native_model_with_wrong_logits_fails_its_trial_saying_why(tmp_path: Path, cache_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = _module(tmp_path, "torchnets_bad")
    toml = tmp_path / "n.toml"
    toml.write_text('name = "n"\nframeworks = ["pytorch"]\nbatch_sizes = [2]\nsynthetic_shape = [3, 8, 8]\n'
                    'synthetic_samples = 16\nsynthetic_classes = 3\nwarmup_steps = 1\ntimed_steps = 1\n'
                    f'device = "cpu"\nthreads = 1\nmodel = "native:{module}:wrong_shape"\n')
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out)]) == 0  # a failed trial never stops the sweep
    with Store.open(out, create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "error" and "must give (2, 3)" in row["reason"]
