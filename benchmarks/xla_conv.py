"""XLA's CPU convolution on small feature maps with many channels, against an im2col matmul, in JAX.

``deep_cnn`` ends in 3x3 convolutions of 256-512 channels on 4x4 and 2x2 maps. Issue 16 reported a
``deep_cnn`` step 6-26x slower in JAX than an im2col formulation there. For each of deep_cnn's conv
shapes (batch ``--batch``, CPU, ``--threads`` CPUs), this times a jitted forward + backward (gradients
of a sum, w.r.t. input and kernel) of ``lax.conv_general_dilated`` and of the same convolution written
as ``conv_general_dilated_patches`` + one matmul, in both NCHW (what the adapter uses) and NHWC, and
prints the median of ``--repeats`` timed calls and the ratios. One process, one framework.

    python benchmarks/xla_conv.py --batch 64 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

#: deep_cnn on 3x32x32 input: (in channels, out channels, side) of each 3x3 'same' convolution.
SHAPES = ((3, 64, 32), (64, 64, 32), (64, 128, 16), (128, 128, 16), (128, 256, 8), (256, 256, 8),
          (256, 512, 4), (512, 512, 4), (512, 512, 2))


def timed(fn: Any, args: tuple[Any, ...], repeats: int) -> float:
    """Median wall time of ``fn(*args)`` with the result ready, after one compiling call."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])  # XLA sizes its pools from this
    import jax
    import jax.numpy as jnp
    from jax import lax

    jax.config.update("jax_platforms", "cpu")

    def conv(layout: str) -> Any:
        dims = (layout, "OIHW", layout)
        return jax.jit(jax.grad(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                       dimension_numbers=dims).sum(), (0, 1)))

    def im2col(layout: str) -> Any:
        def f(x: Any, w: Any) -> Any:
            dims = (layout, "OIHW", layout)
            patches = lax.conv_general_dilated_patches(x, (3, 3), (1, 1), "SAME", dimension_numbers=dims)
            kernel = w.reshape(w.shape[0], -1)  # (out, in*9): the patches' feature order is (in, kh, kw)
            if layout == "NCHW":
                return jnp.einsum("nkhw,ok->nohw", patches, kernel).sum()
            return jnp.einsum("nhwk,ok->nhwo", patches, kernel).sum()

        return jax.jit(jax.grad(f, (0, 1)))

    rng = np.random.default_rng(0)
    print(json.dumps({"jax": jax.__version__, "batch": args.batch, "threads": args.threads,
                      "loadavg": os.getloadavg()}))
    for cin, cout, side in SHAPES:
        w = jnp.asarray(rng.normal(size=(cout, cin, 3, 3)).astype(np.float32))
        x_nchw = jnp.asarray(rng.normal(size=(args.batch, cin, side, side)).astype(np.float32))
        x_nhwc = jnp.transpose(x_nchw, (0, 2, 3, 1))
        row: dict[str, Any] = {"in": cin, "out": cout, "side": side}
        for layout, x in (("NCHW", x_nchw), ("NHWC", x_nhwc)):
            row[f"conv_{layout}_ms"] = 1e3 * timed(conv(layout), (x, w), args.repeats)
            row[f"im2col_{layout}_ms"] = 1e3 * timed(im2col(layout), (x, w), args.repeats)
            row[f"conv/im2col_{layout}"] = row[f"conv_{layout}_ms"] / row[f"im2col_{layout}_ms"]
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
