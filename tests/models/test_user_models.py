"""``model = "package.module:function"``: imported from outside the repository, framework imports refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.models import ModelDescription, build_description
from tests.helpers.user_models import GOOD, user_package


@pytest.fixture()
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.process
def test_a_user_function_from_outside_the_repository_describes_a_model(user_dir: Path) -> None:
    module = user_package(user_dir, GOOD)
    desc = build_description(f"{module}:small_resnet", (3, 16, 16), 4)
    assert desc.name == "small_resnet" and desc.output_shape == (4,)
    assert desc.param_count() == 8 * 3 * 9 + 2 * 8 + 2 * (8 * 8 * 9 + 2 * 8) + 8 * 4 + 4
    assert ModelDescription.from_spec(json.loads(json.dumps(desc.to_spec()))) == desc  # travels as data
    exp = parse_experiment({"name": "e", "frameworks": ["pytorch"], "batch_sizes": [2],
                            "model": f"{module}:small_resnet"})
    assert exp.model == f"{module}:small_resnet"


@pytest.mark.process
def test_the_current_directory_is_searched_like_python_m(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    module = user_package(tmp_path, GOOD)
    assert build_description(f"{module}:small_resnet", (1, 8, 8), 3).classes == 3


@pytest.mark.process
@pytest.mark.parametrize(("body", "message"), [
    ("import torch\n\ndef net(input_shape, classes):\n    pass\n", "imports the framework module 'torch'"),
    ("import tensorflow as tf\n\ndef net(s, c):\n    pass\n", "imports the framework module 'tensorflow'"),
    ("def net(input_shape, classes):\n    import mxnet\n", "calling it imports the framework module 'mxnet'"),
    ("def net(input_shape, classes):\n    return 'a model'\n", "returned a builtins.str, not a"),
    ("def net(input_shape, classes):\n    raise ValueError('no')\n", "failed: ValueError: no"),
    ("def net(:\n", "importing .* failed: SyntaxError"),
    ("from harness.models import Dense, Flatten, ModelDescription\n\n"
     "def net(s, c):\n    return ModelDescription('m', s, c, (Flatten(), Dense(7)))\n", r"ends in shape \(7,\)"),
    ("from harness.models import Dense, Flatten, ModelDescription\n\n"
     "def net(s, c):\n    return ModelDescription('m', (1, 2, 2), c, (Flatten(), Dense(c)))\n",
     "pass the function's input_shape"),
    ("net = 3\n", "is a int, not a function"),
])
def test_bad_user_models_are_refused_naming_the_problem(user_dir: Path, body: str, message: str) -> None:
    module = user_package(user_dir, body)
    with pytest.raises(ConfigError, match=message) as info:
        build_description(f"{module}:net", (3, 8, 8), 5)
    assert f"{module}:net" in str(info.value)


@pytest.mark.process
def test_a_framework_imported_earlier_is_still_seen(user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A framework the parent already holds does not let the model's import through: the model is described in
    a fresh child (harness/models/sandbox.py), where the import hook sees it."""
    import types

    fake = types.ModuleType("torch")  # stands in for a torch some other code imported before
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    module = user_package(user_dir, "import torch\n\ndef net(s, c):\n    pass\n")
    with pytest.raises(ConfigError, match="framework module 'torch'"):
        build_description(f"{module}:net", (3, 8, 8), 5)


@pytest.mark.process
@pytest.mark.parametrize(("name", "message"), [
    ("nosuchmodule_xyz:net", "cannot be imported"),
    ("json:no_such_function", "has no 'no_such_function'"),
    ("bad name:net", "is not \"package.module:function\""),
    ("vgg", "unknown model 'vgg'"),
])
def test_unresolvable_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_description(name, (3, 8, 8), 5)


@pytest.mark.process
def test_run_with_a_bad_user_model_exits_2_and_writes_nothing(user_dir: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(user_dir / "cache"))
    module = user_package(user_dir, "import torch\n\ndef net(s, c):\n    pass\n")
    toml = user_dir / "e.toml"
    toml.write_text(f'name = "e"\nframeworks = ["pytorch"]\nbatch_sizes = [2]\nmodel = "{module}:net"\n')
    out = user_dir / "out"
    assert main(["run", str(toml), "--out", str(out)]) == 2
    assert main(["maxbatch", "--framework", "pytorch", "--model", f"{module}:net", "--device", "cpu",
                 "--memory-limit-mib", "2000", "--out", str(out)]) == 2
    good = user_dir / "good.toml"  # --model overrides the file's model, and is checked the same way
    good.write_text('name = "e"\nframeworks = ["pytorch"]\nbatch_sizes = [2]\nmodel = "tiny_cnn"\n')
    assert main(["run", str(good), "--model", f"{module}:net", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("imports the framework module 'torch'") == 3 and "Traceback" not in err
    assert not out.exists()
