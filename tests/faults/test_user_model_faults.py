"""Issue 24 (user models): a user's model function (``model = "module:function"``) is the user's code running
in batchscope. Whatever it does (exits, crashes, hangs, allocates without end, prints without end) the command
exits 2 with a message naming the model and what happened, writes nothing, and the machine is not exhausted:
the function runs once per run, in a child process with a time limit and a memory limit.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, bs, cli, fake_experiment

MODEL_TIMEOUT_ENV = "BATCHSCOPE_MODEL_TIMEOUT_S"
GOOD = """
from harness.models import Dense, Flatten, ModelDescription

def net(input_shape, classes):
    with open(__file__ + ".calls", "a") as f:  # one line per call
        f.write("call\\n")
    return ModelDescription("net", input_shape, classes, (Flatten(), Dense(classes)))
"""

CASES = {
    "sys-exit-at-import": ("import sys\nsys.exit(0)\n", ("exit",)),
    "sys-exit-0-in-function": ("import sys\n\ndef net(s, c):\n    sys.exit(0)\n", ("exit",)),
    "sys-exit-3-in-function": ("import sys\n\ndef net(s, c):\n    sys.exit(3)\n", ("exit",)),
    "os-exit-in-function": ("import os\n\ndef net(s, c):\n    os._exit(0)\n", ("exited",)),
    "segfault-in-function": ("import ctypes\n\ndef net(s, c):\n    ctypes.string_at(0)\n", ("SIGSEGV",)),
    "hangs-in-function": ("import time\n\ndef net(s, c):\n    time.sleep(3600)\n", ("did not return within 3 s",)),
    "hangs-at-import": ("import time\ntime.sleep(3600)\n\ndef net(s, c):\n    pass\n",
                        ("did not return within 3 s",)),
    "allocates-without-end": ("def net(s, c):\n    hog = []\n    while True:\n        hog.append(bytearray(2**26))\n",
                              ("MiB",)),
    "prints-without-end-then-fails": ("import sys\n\ndef net(s, c):\n    for _ in range(200_000):\n"
                                      "        print('chatter ' * 100)\n    raise ValueError('no model')\n",
                                      ("ValueError: no model",)),
}


def _model(cwd: Path, name: str, body: str) -> str:
    (cwd / f"{name}.py").write_text(textwrap.dedent(body))
    return f"{name}:net"


@pytest.mark.process
@pytest.mark.alone  # a model that prints 160 MB must end inside the 3 s limit: seen over it beside other tests
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_misbehaving_model_function_is_refused_and_bounded(tmp_path: Path, case: str) -> None:
    body, words = CASES[case]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    model = _model(cwd, "mymodel_" + case.replace("-", "_"), body)
    exp = fake_experiment(cwd, model=model)
    t0 = time.monotonic()
    # the launcher's own limit is above the child's: a model that allocates without end stops at the child's.
    # A 3 s time limit for the hangs; the others must be ended by what they do, not by a time limit that a loaded
    # machine can spend starting the child (allocates-without-end was once refused as a hang)
    limit_s = "3" if case.startswith("hangs") else "30"
    done = bs(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), cwd=cwd, timeout=120,
              rlimit_data_mib=3072, extra={MODEL_TIMEOUT_ENV: limit_s})
    assert_refused(done, model, *words)
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "out").exists()
    assert len(done.stderr) < 20_000  # what the model printed is not all repeated


@pytest.mark.process
def test_the_model_function_runs_once_per_run_not_once_per_trial(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    model = _model(cwd, "counted", GOOD)
    exp = fake_experiment(cwd, model=model, batch_sizes=[4, 8], repeats=2)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert (cwd / "counted.py.calls").read_text().count("call") == 1


@pytest.mark.process
def test_maxbatch_runs_the_model_function_once(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    model = _model(cwd, "counted_mb", GOOD)
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", model, "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", "1024", "--max-batch-cap", "64", "--out", str(tmp_path / "mb"), cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert (cwd / "counted_mb.py.calls").read_text().count("call") == 1
