"""A user's model function run in a child process, bounded in time and memory (issue 24, user models).

``model = "module:function"`` is the user's code, and the parent must survive whatever it does: call
``sys.exit()``, ``os._exit()``, crash the interpreter, wait for ever, allocate without end, print without end.
So the module is imported and the function called in a fresh interpreter (``python -m
harness.models.sandbox``) that:

* runs under RLIMIT_DATA of :data:`MEMORY_MIB` above what the interpreter holds at start (a description is
  layer records: kilobytes), so an allocation past it fails there, not in the machine;
* is killed after :data:`TIMEOUT_S` (``BATCHSCOPE_MODEL_TIMEOUT_S`` to change it), by the parent and, should
  the parent itself be gone, by its own ``alarm``;
* writes the description (JSON) or the error to a file; its stdout and stderr are drained with their head and
  tail kept (:mod:`harness.capture`), and the tail is quoted where it crashed without saying why.

The parent calls it once per run (this module's :func:`describe_user_model` caches the result), not
once per trial: one interpreter start, about a quarter of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.capture import BoundedOutput
from harness.errors import ConfigError
from harness.models.description import ModelDescription
from harness.models.user import describe_here, split_name

#: how long importing the module and calling the function may take (a description takes milliseconds)
TIMEOUT_S = 60.0
TIMEOUT_ENV = "BATCHSCOPE_MODEL_TIMEOUT_S"
#: how much the child may allocate beyond what it holds when it starts
MEMORY_MIB = 1024
#: what of the child's output is kept for a message (its head and tail)
OUTPUT_KEEP_BYTES = 4096


def timeout_s() -> float:
    """The time limit: :data:`TIMEOUT_S`, or ``$BATCHSCOPE_MODEL_TIMEOUT_S`` where set to a positive number."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return TIMEOUT_S
    return value if 0 < value < 1e6 else TIMEOUT_S


def _child_env() -> dict[str, str]:
    """The parent's environment, with its ``sys.path`` (a module the parent can find, the child finds)."""
    paths = [p or os.getcwd() for p in sys.path]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)), PYTHONUNBUFFERED="1")


def _ended_without_answer(name: str, code: int, output: str) -> ConfigError:
    if code < 0:
        how = f"was killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else \
            f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    tail = output.strip().splitlines()[-12:]
    said = ("; its last output:\n  " + "\n  ".join(tail)) if tail else ""
    return ConfigError(f"model {name!r}: the process importing and calling it {how} before returning a "
                       f"description (os._exit, or a crash in the model's code){said}")


def describe_in_child(name: str, input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """Run :func:`harness.models.user.describe_here` in a bounded child; its description, or a ConfigError."""
    limit = timeout_s()
    with tempfile.TemporaryDirectory(prefix="batchscope-model-") as tmp:
        answer = Path(tmp) / "answer.json"
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "harness.models.sandbox", "--answer", str(answer), "--timeout-s", str(limit),
                 "--classes", str(classes), "--shape", ",".join(map(str, input_shape)), "--", name],
                stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, env=_child_env(), cwd=os.getcwd(),
                start_new_session=True)
        finally:
            os.close(write_fd)
        output = BoundedOutput(read_fd, head_bytes=OUTPUT_KEEP_BYTES, tail_bytes=OUTPUT_KEEP_BYTES,
                               name="model-output").start()
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # Ctrl-C, a timeout: the child and anything it started go
            if proc.poll() is None:
                _kill(proc)
        output.close(timeout_s=2.0)
        if code is None:
            raise ConfigError(f"model {name!r} did not return within {limit:g} s (importing its module and calling "
                              "it); a description is layer records and takes milliseconds: look for a loop or a wait "
                              f"in the model's code (the limit: {TIMEOUT_ENV})")
        if not answer.is_file():
            raise _ended_without_answer(name, code, output.text())
        reply = json.loads(answer.read_text())
    if "error" in reply:
        raise ConfigError(reply["error"])
    return ModelDescription.from_spec(reply["spec"])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


# ---------------------------------------------------------------- the child
def _limit_memory() -> None:
    """RLIMIT_DATA at what this interpreter holds now plus :data:`MEMORY_MIB`."""
    held_kib = 0
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmData:"):
                held_kib = int(line.split()[1])
    limit = held_kib * 1024 + MEMORY_MIB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


#: descriptions made in this process, by (name, input shape, classes): the user's function runs once per run
_DESCRIBED: dict[tuple[str, tuple[int, ...], int], ModelDescription] = {}


def describe_user_model(name: str, input_shape: tuple[int, int, int], classes: int) -> ModelDescription:
    """The user's function's description of this input, made once per process in a child that is bounded in time
    and memory (:mod:`harness.models.sandbox`): whatever the user's code does (exits, crashes, hangs, allocates
    without end) is a :class:`ConfigError` naming the model, and the parent is untouched."""
    key = (name, tuple(int(d) for d in input_shape), int(classes))
    if key not in _DESCRIBED:
        split_name(name)
        _DESCRIBED[key] = describe_in_child(name, key[1], key[2])  # type: ignore[arg-type]
    return _DESCRIBED[key]


def _answer(name: str, shape: tuple[int, int, int], classes: int) -> dict[str, Any]:
    try:
        return {"spec": describe_here(name, shape, classes).to_spec()}
    except ConfigError as e:
        return {"error": str(e)}
    except SystemExit as e:  # sys.exit() at import or in the function: a refusal, never the command's exit
        return {"error": f"model {name!r}: its code called sys.exit({e.code!r}) while being imported or called; a "
                         "model module must not exit (guard a script's exit with if __name__ == '__main__')"}
    except MemoryError:
        return {"error": f"model {name!r}: its code allocated more than {MEMORY_MIB} MiB while being imported or "
                         "called; a description is layer records (kilobytes): look for what it builds or loads"}
    except BaseException as e:  # noqa: BLE001 - the user's code may raise anything: it is reported, never a traceback
        return {"error": f"model {name!r}: importing or calling it raised {type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child: describe, write the answer file, exit 0."""
    parser = argparse.ArgumentParser(prog="python -m harness.models.sandbox")
    parser.add_argument("--answer", required=True)
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("name")
    args = parser.parse_args(argv)
    signal.alarm(int(args.timeout_s) + 5)  # dies by itself should the parent be gone (SIGALRM's default)
    try:
        _limit_memory()
    except (OSError, ValueError):  # not Linux: the time limit still holds
        pass
    shape = tuple(int(d) for d in args.shape.split(","))
    reply = _answer(args.name, shape, args.classes)  # type: ignore[arg-type]
    tmp = args.answer + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(reply, f)
    os.replace(tmp, args.answer)  # whole or absent: a crash half-way is never read as an answer
    return 0


if __name__ == "__main__":
    sys.exit(main())
