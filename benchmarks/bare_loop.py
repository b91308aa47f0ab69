"""A bare, hand-written, idiomatic training loop of the seed study's CNN in one framework (no harness).

Run as ``python benchmarks/bare_loop.py --framework tensorflow --batch 64 --threads 2``; prints one
JSON line with samples/s. It is the baseline of ``harness_overhead.py``: the same model (osu_cnn:
Conv 32@3x3 same, ReLU, MaxPool 2, Flatten, Dense 128, ReLU, Dense classes), batch, thread count,
SGD with momentum and number of steps as a harness trial, written the way each framework's own
tutorials write it: a PyTorch eager loop, a Keras model with a ``tf.function`` step, a hybridised
Gluon network with a Trainer, a jitted JAX step (its weights and momentum donated, as the harness's step does
and as JAX training code commonly writes it). Throughput is measured like a user would: wall time of
the timed steps with one synchronisation at the end (none per step), batches converted to tensors beforehand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def batches(args: argparse.Namespace) -> list[tuple[np.ndarray, np.ndarray]]:
    """A few distinct random batches (NCHW float32, int64 labels), cycled through by the loop."""
    rng = np.random.default_rng(0)
    c, h, w = args.shape
    return [
        (
            rng.normal(size=(args.batch, c, h, w)).astype(np.float32),
            rng.integers(0, args.classes, size=args.batch).astype(np.int64),
        )
        for _ in range(4)
    ]


def torch_loop(args: argparse.Namespace) -> tuple[Callable[[int], None], Callable[[], None]]:
    import torch
    from torch import nn

    torch.set_num_threads(args.threads)
    c, h, w = args.shape
    model = nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (h // 2) * (w // 2), 128),
        nn.ReLU(),
        nn.Linear(128, args.classes),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches(args)]

    def step(i: int) -> None:
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return step, lambda: None


def tensorflow_loop(args: argparse.Namespace) -> tuple[Callable[[int], None], Callable[[], None]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    c, h, w = args.shape
    model = keras.Sequential(
        [
            keras.Input((h, w, c)),
            keras.layers.Conv2D(32, 3, padding="same"),
            keras.layers.ReLU(),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(128),
            keras.layers.ReLU(),
            keras.layers.Dense(args.classes),
        ]
    )
    opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    data = [(tf.constant(x.transpose(0, 2, 3, 1)), tf.constant(y)) for x, y in batches(args)]
    last: list[Any] = [None]

    def step(i: int) -> None:
        last[0] = train(*data[i % len(data)])

    return step, lambda: last[0].numpy()


def mxnet_loop(args: argparse.Namespace) -> tuple[Callable[[int], None], Callable[[], None]]:
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["MXNET_CPU_WORKER_NTHREADS"] = "1"
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # MXNet 1.9.1 uses the alias NumPy 1.24 removed
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(
        nn.Conv2D(32, 3, padding=1),
        nn.Activation("relu"),
        nn.MaxPool2D(2),
        nn.Flatten(),
        nn.Dense(128, activation="relu"),
        nn.Dense(args.classes),
    )
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    data = [(mx.nd.array(x), mx.nd.array(y)) for x, y in batches(args)]

    def step(i: int) -> Any:
        x, y = data[i % len(data)]
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch)
        return trainer._params[0].data()  # a weight this update writes: waiting for it waits for the update

    return step, mx.nd.waitall


def jax_loop(args: argparse.Namespace) -> tuple[Callable[[int], None], Callable[[], None]]:
    # XLA sizes its CPU thread pools from the CPUs the process may run on: the same knob the adapter uses.
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    c, h, w = args.shape
    rng = np.random.default_rng(1)

    def uniform(shape: tuple[int, ...], fan_in: int) -> Any:
        limit = np.sqrt(6.0 / fan_in)
        return jnp.asarray(rng.uniform(-limit, limit, size=shape).astype(np.float32))

    flat = 32 * (h // 2) * (w // 2)
    params = [uniform((32, c, 3, 3), c * 9), jnp.zeros(32), uniform((flat, 128), flat), jnp.zeros(128),
              uniform((128, args.classes), 128), jnp.zeros(args.classes)]
    momentum = [jnp.zeros_like(p) for p in params]

    def loss_fn(p: list[Any], x: Any, y: Any) -> Any:
        z = jax.lax.conv_general_dilated(x, p[0], (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        z = jax.nn.relu(z + p[1][None, :, None, None])
        z = jax.lax.reduce_window(z, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        z = jax.nn.relu(z.reshape(z.shape[0], -1) @ p[2] + p[3]) @ p[4] + p[5]
        return -jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], axis=1).mean()

    def update(p: list[Any], m: list[Any], x: Any, y: Any) -> tuple[list[Any], list[Any]]:
        grads = jax.grad(loss_fn)(p, x, y)
        m = [0.9 * b + g for b, g in zip(m, grads, strict=True)]
        return [w - 0.01 * b for w, b in zip(p, m, strict=True)], m

    # donated (the default): the old weights and momentum are updated in place, as the harness's step does and as
    # JAX training code commonly writes it (without donation the step holds two copies of both)
    train = jax.jit(update, donate_argnums=(0, 1) if args.donate else ())

    data = [(jnp.asarray(x), jnp.asarray(y.astype(np.int32))) for x, y in batches(args)]
    state = [params, momentum]

    def step(i: int) -> None:
        state[0], state[1] = train(state[0], state[1], *data[i % len(data)])

    return step, lambda: jax.block_until_ready(state)


LOOPS = {"pytorch": torch_loop, "tensorflow": tensorflow_loop, "mxnet": mxnet_loop, "jax": jax_loop}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(LOOPS), required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--shape", type=lambda s: tuple(int(v) for v in s.split(",")), default=(1, 28, 28))
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument(
        "--sync-each-step",
        action="store_true",
        help="synchronise after every step and report batch / median step time, the way the "
        "harness measures (to tell the cost of per-step timing from the harness' own)",
    )
    parser.add_argument(
        "--sync-lag",
        action="store_true",
        help="time every step one step late (MXNet): after step n is queued, wait for step n-1's update and read the "
        "clock, so the engine always has the next step queued; batch / median interval between two completions. "
        "What a per-step clock that does not drain the engine would read (issue 40)",
    )
    parser.add_argument(
        "--wait-every",
        type=int,
        default=0,
        metavar="K",
        help="synchronise after every K-th timed step, throughput by the wall as the plain loop's (K = 1: a wait "
        "after every step; 0: none but the last). What the harness's windows of queued steps read (issue 40)",
    )
    parser.add_argument(
        "--donate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="JAX: donate the weights and momentum to the jitted step (the default, as the harness's step does; "
        "--no-donate keeps both copies: what donation costs or saves, issue 40)",
    )
    parser.add_argument(
        "--denormals",
        choices=("flush", "framework-default"),
        default="flush",
        help="as the harness trial's setting (default flush, like batchscope's): FTZ/DAZ set before the "
        "framework is imported, so both sides stand on the same side of the denormal cliff",
    )
    args = parser.parse_args(argv)
    if args.wait_every < 0 or (args.wait_every and (args.sync_each_step or args.sync_lag)):
        parser.error("--wait-every K takes K >= 0, without --sync-each-step or --sync-lag")
    if args.sync_lag and (args.framework != "mxnet" or args.sync_each_step):
        parser.error("--sync-lag is MXNet's (its step returns the array its update writes), without --sync-each-step")
    if args.denormals == "flush":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from adapters.fpenv import set_cpu_flush

        set_cpu_flush(True)  # before the import below starts the framework's threads: they inherit it
    step, sync = LOOPS[args.framework](args)
    if args.denormals == "flush" and args.framework == "pytorch":
        import torch

        torch.set_flush_denormal(True)
    for i in range(args.warmup):
        step(i)
    sync()
    step_s: list[float] = []
    t0 = time.perf_counter()
    done_at: list[float] = []
    previous: Any = None
    for i in range(args.steps):
        t_step = time.perf_counter()
        handle = step(args.warmup + i)
        if args.sync_each_step:
            sync()
            step_s.append(time.perf_counter() - t_step)
        elif args.wait_every and (i + 1) % args.wait_every == 0:
            sync()
        elif args.sync_lag:
            if previous is not None:
                previous.wait_to_read()  # step n-1's update done; step n stays queued behind it
                done_at.append(time.perf_counter())
            previous = handle
    sync()
    wall_s = time.perf_counter() - t0
    if args.sync_lag:
        done_at.append(time.perf_counter())
        step_s = list(np.diff(done_at))
    rate = (args.batch / float(np.median(step_s)) if args.sync_each_step or args.sync_lag
            else args.steps * args.batch / wall_s)
    print(
        json.dumps(
            {
                "framework": args.framework,
                "batch": args.batch,
                "threads": args.threads,
                "steps": args.steps,
                "wall_s": wall_s,
                "sync_each_step": args.sync_each_step,
                "sync_lag": args.sync_lag,
                "wait_every": args.wait_every,
                "donate": args.donate if args.framework == "jax" else None,
                "samples_per_s": rate,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
