"""How long each framework's managed environment takes to build, with pip (batchscope's installer) and with uv.

    python benchmarks/env_build.py [--frameworks pytorch,jax] [--repeats 3] [--uv]

Each build goes into a fresh temporary folder (``BATCHSCOPE_ENVS``), from the lock batchscope uses
(``adapters/<framework>/locks/cpu.txt``), one at a time, then all at once as ``run`` does (``harness.envs.resolve.
choose``). pip's own cache is warm after the first repeat (a cold build is the first repeat on a machine that never
built it). ``--uv`` also installs each lock with uv (``pip install uv`` first), which does not read pip's
configuration: this machine's (find-links for the CPU torch wheel, extra indexes) is passed to it by hand, as a user
would have to. Prints medians and the ratio uv / pip; a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.envs.build import build, python_in  # noqa: E402
from harness.envs.resolve import WORKER_PACKAGES, _code_dir, choose  # noqa: E402
from harness.envs.spec import spec_for  # noqa: E402
from harness.registry import adapter_class  # noqa: E402

FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mxnet")


def pip_config_as_uv_flags() -> list[str]:
    """This machine's pip configuration (find-links, extra indexes) as uv's flags: uv reads none of it."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    flags: list[str] = []
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        value = value.strip().strip("'")
        if key.endswith("find-links"):
            flags += [f for v in value.split() for f in ("--find-links", v)]
        elif key.endswith("extra-index-url"):
            flags += [f for v in value.split() for f in ("--extra-index-url", v)]
    return flags


def build_pip(framework: str, root: Path) -> float:
    spec = spec_for(framework, adapter_class(framework), "cpu")
    assert spec is not None
    t0 = time.monotonic()
    build(spec, root, (str(_code_dir(WORKER_PACKAGES)),))
    return time.monotonic() - t0


def build_uv(framework: str, root: Path, uv: str) -> float:
    spec = spec_for(framework, adapter_class(framework), "cpu")
    assert spec is not None
    t0 = time.monotonic()
    target = root / f"uv-{framework}"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    lock = root / f"{framework}.txt"
    lock.write_text("\n".join(spec.requirements) + "\n")
    subprocess.run([uv, "pip", "install", "--python", str(python_in(target)), "--no-deps", "-r", str(lock),
                    *pip_config_as_uv_flags()], check=True, capture_output=True)
    subprocess.run([str(python_in(target)), "-c", f"import {spec.import_name}"], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(_code_dir(WORKER_PACKAGES))})
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uv", action="store_true", help="also time uv (pip install uv first)")
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if f]
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if args.uv and not Path(uv).exists():
        parser.error("--uv: no uv found (pip install uv)")
    times: dict[tuple[str, str], list[float]] = {}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for r in range(args.repeats):
        for fw in frameworks:  # sides alternate within a repeat, one build at a time
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["BATCHSCOPE_ENVS"] = tmp
                times.setdefault((fw, "pip"), []).append(build_pip(fw, Path(tmp)))
            if args.uv:
                with tempfile.TemporaryDirectory() as tmp:
                    times.setdefault((fw, "uv"), []).append(build_uv(fw, Path(tmp), uv))
        with tempfile.TemporaryDirectory() as tmp:  # all at once, as `run` builds them
            os.environ["BATCHSCOPE_ENVS"] = tmp
            t0 = time.monotonic()
            chosen = choose(frameworks, {}, "cpu")
            assert not any(i.problem for i in chosen.values()), [i.problem for i in chosen.values()]
            times.setdefault(("all", "pip, side by side"), []).append(time.monotonic() - t0)
        print(f"repeat {r + 1}: " + ", ".join(f"{k[0]} {k[1]} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    print(f"\n{'environment':<12} {'installer':<18} {'first s':>8} {'median s':>9}  (n = {args.repeats})")
    for (fw, how), values in times.items():
        print(f"{fw:<12} {how:<18} {values[0]:>8.1f} {statistics.median(values):>9.1f}")
    if args.uv:
        for fw in frameworks:
            ratio = statistics.median(times[(fw, "uv")]) / statistics.median(times[(fw, "pip")])
            print(f"{fw}: uv / pip = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
