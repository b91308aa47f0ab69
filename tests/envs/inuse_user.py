"""A batchscope command using a managed environment, in a process of its own (tests/envs/test_in_use.py), and the
tiny environment it uses: ``python -m tests.envs.inuse_user ENVS hold|rebuild``.

``hold``: resolves the numpy-only fake plugin's environment under ENVS as a command does
(:func:`harness.envs.resolve.managed_interpreter`), says ``using ...`` and keeps going until its stdin closes (or it
is killed). ``rebuild``: the same, then, on a line on stdin, rebuilds the environment as a trial that found it
damaged does (:func:`harness.envs.build.build`, with :func:`fill_env` for the installer), says ``rebuilt`` or
``failed: ...``, and keeps going until its stdin closes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from harness.envs import build as build_mod
from harness.envs.build import EnvironmentBuildError, python_in
from harness.envs.spec import EnvSpec

TARGET = "tests.fakes.env_adapters:NumpyEnvAdapter"


def fill_env(env_dir: Path, spec: EnvSpec, *args: object) -> dict[str, object]:
    """A managed environment of ``spec`` (numpy alone) made without pip, in milliseconds, in which a worker really
    starts: a venv's layout whose ``pyvenv.cfg`` is this interpreter's, numpy's ``.dist-info`` at the pinned version,
    and, for numpy's files, a ``numpy.pth`` naming this interpreter's site-packages (its RECORD lists it: deleting it
    damages the environment as deleting numpy's folder would). :func:`harness.envs.build._build_into`'s signature:
    returns the facts to record."""
    site = env_dir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    python_in(env_dir).parent.mkdir(parents=True, exist_ok=True)
    python_in(env_dir).symlink_to(os.path.realpath(sys.executable))
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    (env_dir / "pyvenv.cfg").write_text(cfg.read_text() if cfg.is_file() else
                                        f"home = {Path(os.path.realpath(sys.executable)).parent}\n")
    info = site / f"numpy-{np.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: numpy\nVersion: {np.__version__}\n")
    (site / "numpy.pth").write_text(f"{Path(np.__file__).parents[1]}\n")
    (info / "RECORD").write_text(f"numpy.pth,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return {"framework": spec.framework, "kind": spec.kind, "digest": spec.digest, "lock": spec.source,
            "installer": "test", "requirements": list(spec.requirements), "numpy": np.__version__}


def main() -> None:
    from harness.envs.resolve import managed_interpreter
    from tests.fakes.env_adapters import NumpyEnvAdapter

    root, mode = Path(sys.argv[1]), sys.argv[2]
    interp = managed_interpreter("npenv", "cpu", root=root, adapter=(TARGET, NumpyEnvAdapter))
    print(f"using {interp.python} problem={interp.problem!r}", flush=True)
    if mode == "rebuild":
        sys.stdin.readline()
        build_mod._build_into = fill_env  # type: ignore[assignment]
        assert interp.spec is not None
        try:
            build_mod.build(interp.spec, root, interp.pythonpath)
            print("rebuilt", flush=True)
        except EnvironmentBuildError as e:
            print(f"failed: {e}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
