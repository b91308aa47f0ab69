"""How long each framework's managed environment takes to build, with pip and with uv, cold and warm.

    python benchmarks/env_build.py [--frameworks pytorch,jax] [--repeats 3] [--uv] [--side-by-side] [--json FILE]

Every build is batchscope's own (:func:`harness.envs.build.build`: a venv, the lock installed with ``--no-deps
--require-hashes``, the framework's import check; ``BATCHSCOPE_INSTALLER`` picks pip or uv, which is given
``--compile-bytecode`` so that both leave the same files), into an empty folder, one at a time. For each framework and
installer a repeat is a *cold* build (an empty pip or uv cache of its own: ``PIP_CACHE_DIR`` / ``UV_CACHE_DIR`` in a
temporary folder) followed by a *warm* one (the cache the cold build filled). Within a repeat pip and uv alternate,
and which goes first alternates between repeats, so a change in the machine's load falls on both alike; the load
average is read before each build and printed beside it. uv reads none of pip's configuration: batchscope passes
this machine's (``pip config list``: find-links, extra indexes) as uv's flags
(:func:`harness.envs.build.uv_flags`), as a user would have to. After the first repeat the two environments of each
framework are compared (``pip freeze`` of each): the same distributions and versions, or the difference is printed.
The operating system's page cache is not dropped (a shared machine): files read from local indexes may come from
memory in a "cold" build. ``--side-by-side`` also times all frameworks built at once, as ``run`` builds them. Prints
medians and the ratio pip / uv; a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.envs.build import INSTALLER_VAR, build, python_in, uv_binary  # noqa: E402
from harness.envs.resolve import WORKER_PACKAGES, _code_dir, choose  # noqa: E402
from harness.envs.spec import spec_for  # noqa: E402
from harness.registry import adapter_class  # noqa: E402

FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mxnet")


def timed_build(framework: str, installer: str, envs: Path, cache: Path) -> tuple[float, Path]:
    """Seconds to build ``framework``'s CPU environment with ``installer`` into ``envs`` (empty), its cache in
    ``cache``; and where it was built."""
    spec = spec_for(framework, adapter_class(framework), "cpu")
    assert spec is not None
    settings = {"PIP_CACHE_DIR" if installer == "pip" else "UV_CACHE_DIR": str(cache), INSTALLER_VAR: installer}
    before = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        t0 = time.monotonic()
        path = build(spec, envs, (str(_code_dir(WORKER_PACKAGES)),))
        return time.monotonic() - t0, path
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def frozen(env: Path) -> list[str]:
    """``pip freeze`` of an environment (the parent's pip, pointed at it: the environments hold no pip)."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python_in(env)), "freeze", "--all"],
                          capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


def load() -> float:
    return os.getloadavg()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uv", action="store_true", help="also time uv (pip install uv first)")
    parser.add_argument("--side-by-side", action="store_true", help="also time all frameworks built at once (pip)")
    parser.add_argument("--json", type=Path, help="write every timing and load reading here")
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if f]
    installers = ["pip"]
    if args.uv:
        try:
            print(f"uv: {uv_binary()}")
        except Exception as e:  # noqa: BLE001 - said, then the usage error
            parser.error(f"--uv: {e}")
        installers.append("uv")
    times: dict[tuple[str, str, str], list[float]] = {}
    loads: dict[tuple[str, str, str], list[float]] = {}
    same: dict[str, bool] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"started {started}; load average {os.getloadavg()}", flush=True)
    for r in range(args.repeats):
        order = installers if r % 2 == 0 else installers[::-1]
        for fw in frameworks:
            built: dict[str, Path] = {}
            with tempfile.TemporaryDirectory(prefix="env-build-bench-") as tmp:
                for installer in order:
                    cache = Path(tmp) / f"{installer}-cache"
                    for state in ("cold", "warm"):
                        key = (fw, installer, state)
                        loads.setdefault(key, []).append(load())
                        seconds, path = timed_build(fw, installer, Path(tmp) / f"{installer}-{state}", cache)
                        times.setdefault(key, []).append(seconds)
                        built.setdefault(installer, path)
                        print(f"repeat {r + 1}: {fw:<10} {installer:<3} {state}: {seconds:6.1f} s "
                              f"(load {loads[key][-1]:.2f})", flush=True)
                if len(built) == 2 and fw not in same:
                    a, b = frozen(built["pip"]), frozen(built["uv"])
                    same[fw] = a == b
                    print(f"{fw}: pip freeze of both environments "
                          f"{'is the same' if a == b else 'differs: ' + str(sorted(set(a) ^ set(b)))} "
                          f"({len(a)} distributions)", flush=True)
        if args.side_by_side:
            with tempfile.TemporaryDirectory() as tmp:  # all at once, as `run` builds them
                os.environ["BATCHSCOPE_ENVS"] = tmp
                key = ("all", "pip", "side by side")
                loads.setdefault(key, []).append(load())
                t0 = time.monotonic()
                chosen = choose(frameworks, {}, "cpu")
                assert not any(i.problem for i in chosen.values()), [i.problem for i in chosen.values()]
                times.setdefault(key, []).append(time.monotonic() - t0)
                print(f"repeat {r + 1}: all side by side {times[key][-1]:.1f} s", flush=True)
    ended = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"\n{started} to {ended}, n = {args.repeats} each")
    print(f"{'environment':<12} {'installer':<4} {'state':<12} {'median s':>9} {'all s':>24} {'load':>16}")
    for (fw, how, state), values in times.items():
        spread = " ".join(f"{v:.1f}" for v in values)
        load_range = f"{min(loads[(fw, how, state)]):.2f}-{max(loads[(fw, how, state)]):.2f}"
        print(f"{fw:<12} {how:<4} {state:<12} {statistics.median(values):>9.1f} {spread:>24} {load_range:>16}")
    if args.uv:
        for fw in frameworks:
            for state in ("cold", "warm"):
                ratio = statistics.median(times[(fw, "pip", state)]) / statistics.median(times[(fw, "uv", state)])
                print(f"{fw} {state}: pip / uv = {ratio:.1f}")
    if args.json:
        args.json.write_text(json.dumps({
            "started": started, "ended": ended, "repeats": args.repeats, "same_environment": same,
            "runs": [{"framework": k[0], "installer": k[1], "state": k[2], "seconds": [round(v, 2) for v in vs],
                      "load": [round(v, 2) for v in loads[k]]} for k, vs in times.items()]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
