"""Issue 13, items 5, 8 and 12: what the parent can know before a trial runs it checks first, refusing with
exit 2 and nothing written; a trial that cannot even start is a ``crashed`` row, and the sweep goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import FAKE_ADAPTERS, assert_refused, cli, fake_experiment


@pytest.mark.process
def test_an_interpreter_that_cannot_start_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Issue 38: a named interpreter is checked before the first trial (it runs batchscope's facts script there)."""
    bad_python = tmp_path / "python"
    bad_python.write_text("this is not a program\n")
    bad_python.chmod(0o755)  # executable, so the file passes the first check; exec fails: Exec format error
    exp = fake_experiment(tmp_path, frameworks=["fake", "fake2"], batch_sizes=[4])
    exp.write_text(exp.read_text() + f'\n[adapters.fake]\npython = "{bad_python}"\n')
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "fake cannot run in", str(bad_python), "Exec format error")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_worker_whose_interpreter_cannot_start_is_a_crashed_row(tiny_data: Any, tmp_path: Path) -> None:
    """Past the check (an interpreter replaced during the sweep), the executor stores a crashed row, no traceback."""
    from harness.records import TrialUnit
    from harness.run.executor import LocalExecutor
    from tests.conftest import make_trial
    from tests.helpers.fake_trial import TARGET

    bad_python = tmp_path / "python"
    bad_python.write_text("this is not a program\n")
    bad_python.chmod(0o755)
    spec = make_trial(adapter_options={"behaviour": "ok"}, epochs=1, batch_size=8)
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target=TARGET, python=str(bad_python))
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "crashed" and "could not be started" in outcome.reason
    assert str(bad_python) in outcome.reason and "Exec format error" in outcome.reason


def test_device_gpu_without_a_gpu_is_refused_in_the_parent(tmp_path: Path) -> None:
    from harness.monitor.environment import gpus

    if gpus()[0]:
        pytest.skip("this machine has a GPU: the no-GPU refusal cannot be shown here")
    exp = fake_experiment(tmp_path, device="gpu")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, 'device = "gpu"', "NVML sees no GPU")
    assert not (tmp_path / "out").exists()


def test_a_model_that_does_not_fit_the_input_is_refused_in_the_parent(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, model="osu_cnn", synthetic_shape=[1, 1, 1])
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "does not fit input shape")
    assert not (tmp_path / "out").exists()


def test_maxbatch_on_an_unknown_dataset_writes_nothing(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--dataset", "imagenet",
              "--memory-limit-mib", "1024", "--out", str(tmp_path / "mb"))
    assert_refused(done, "imagenet")
    assert not (tmp_path / "mb").exists()


def test_maxbatch_with_a_missing_data_dir_writes_nothing(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--dataset", "cifar10",
              "--data-dir", str(tmp_path / "nowhere.tar.gz"), "--memory-limit-mib", "1024",
              "--out", str(tmp_path / "mb"))
    assert_refused(done, "nowhere.tar.gz")
    assert not (tmp_path / "mb").exists()


@pytest.mark.parametrize("command", ["run", "maxbatch"])
def test_an_adapter_that_cannot_be_loaded_writes_nothing(tmp_path: Path, command: str) -> None:
    adapters = FAKE_ADAPTERS + ",broken=tests.faults.raising_plugin:Adapter"
    if command == "run":
        exp = fake_experiment(tmp_path, frameworks=["fake", "broken"])
        done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), adapters=adapters)
    else:
        done = cli(tmp_path, "maxbatch", "--framework", "broken", "--model", "tiny_cnn", "--memory-limit-mib", "1024",
                  "--out", str(tmp_path / "out"), adapters=adapters)
    assert_refused(done, "'broken'", "cannot be loaded", "libfoo 3")
    assert not (tmp_path / "out").exists()
