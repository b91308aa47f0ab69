"""Install every CUDA lock once, for real, and ask each framework what CUDA it finds (issue 50, item 7).

    BATCHSCOPE_CACHE=/tmp/cuda-envs PIP_NO_CACHE_DIR=1 python benchmarks/cuda_envs.py [pytorch tensorflow jax] \\
        [--keep]

Each framework's CUDA environment is built by batchscope's builder (:func:`harness.envs.build.build`: the lock with
``--no-deps --require-hashes``, the import check) under ``$BATCHSCOPE_CACHE``, whatever GPU the machine has (none
is needed: the wheels install and import without a driver), timed, measured with ``du``, then asked: PyTorch for
``torch.version.cuda`` and cuDNN, TensorFlow for ``tf.test.is_built_with_cuda()`` and its build's CUDA and cuDNN,
JAX for its CUDA plugin (the ``jax_plugins`` entry point and module, as JAX's discovery lists them), and each for
the CUDA libraries its process loaded from the environment. The environment is deleted afterwards unless
``--keep``. Several GB per framework: never in CI, never a test. docs/environments.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.envs.build import build, python_in  # noqa: E402
from harness.envs.resolve import WORKER_PACKAGES, _code_dir  # noqa: E402
from harness.envs.spec import envs_root, spec_for  # noqa: E402
from harness.registry import adapter_class  # noqa: E402

#: what each framework is asked in its environment; each prints one JSON line
CHECKS = {
    "pytorch": """
import torch
out = {"torch": torch.__version__, "torch.version.cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
       "cuda.is_available": torch.cuda.is_available()}
try:
    torch.zeros(1).cuda()
except Exception as e:
    out["cuda()"] = f"{type(e).__name__}: {str(e)[:160]}"
""",
    "tensorflow": """
import tensorflow as tf
info = tf.sysconfig.get_build_info()
out = {"tensorflow": tf.__version__, "is_built_with_cuda": tf.test.is_built_with_cuda(),
       "cuda_version": info.get("cuda_version"), "cudnn_version": info.get("cudnn_version"),
       "gpus": [str(d) for d in tf.config.list_physical_devices("GPU")]}
""",
    "jax": """
import importlib.metadata as md, pkgutil
import jax, jax_plugins
out = {"jax": jax.__version__,
       "entry_points(jax_plugins)": sorted(f"{e.name} = {e.value}" for e in md.entry_points(group="jax_plugins")),
       "jax_plugins modules": sorted(m.name for m in pkgutil.iter_modules(jax_plugins.__path__)),
       "plugin": {d: md.version(d) for d in ("jax-cuda12-plugin", "jax-cuda12-pjrt")},
       "devices": [str(d) for d in jax.devices()]}
""",
}
#: every check ends with the CUDA libraries the process mapped from the environment's nvidia/ packages
LIBRARIES = """
import json
maps = open("/proc/self/maps").read().splitlines()
out["libraries"] = sorted({ln.split()[-1].rsplit("/", 1)[-1] for ln in maps if "site-packages/nvidia" in ln
                           and ".so" in ln})
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("frameworks", nargs="*", default=list(CHECKS), help="default: pytorch tensorflow jax")
    parser.add_argument("--keep", action="store_true", help="leave the environments in place")
    args = parser.parse_args()
    root = envs_root()
    print(f"environments under {root}; started {time.strftime('%H:%M:%S UTC', time.gmtime())}", flush=True)
    for framework in args.frameworks:
        spec = spec_for(framework, adapter_class(framework), "cuda")
        if spec is None or spec.kind != "cuda":
            print(f"{framework}: no CUDA lock")
            continue
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        path = build(spec, root, (str(_code_dir(WORKER_PACKAGES)),), print)
        seconds = time.monotonic() - t0
        size = int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True).stdout.split()[0])
        done = subprocess.run([str(python_in(path)), "-c", CHECKS[framework] + LIBRARIES], capture_output=True,
                              text=True)
        found = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else done.stderr[-2000:]
        print(json.dumps({"framework": framework, "environment": path.name, "packages": len(spec.requirements),
                          "build_s": round(seconds, 1), "load_at_start": round(load, 2),
                          "size_gib": round(size / 2**30, 2), "found": found}, indent=1), flush=True)
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
