"""MXNet adapter: a hybridised Gluon network built from the shared description, NCHW like the description.

MXNet runs every operator asynchronously on its dependency engine, so this adapter calls
``mx.nd.waitall()`` before handing control back to anyone who reads a clock (after preparing a batch
and after each train step); a batch prepared ahead on the prefetch thread waits for its own arrays only.
``mxnet`` is imported inside methods only, through :func:`import_mxnet`.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import threading
from typing import Any

import numpy as np

from adapters import fpenv
from adapters.base import (
    API_VERSION,
    Adapter,
    MemoryStats,
    OptimizerSpec,
    PrecisionSeen,
    RuntimeConfig,
    SetupFacts,
    check_fits,
    is_generic_oom,
)
from adapters.builds import GpuBuild
from adapters.mxnet import build, mathmode
from adapters.mxnet.layers import GluonLayers
from adapters.mxnet.threads import single_omp_thread_here
from harness.errors import ConfigError
from harness.models import (
    ModelDescription,
)

MIB = 1024.0 * 1024.0
# Texts MXNet 1.9 writes when an allocation fails (pooled GPU storage manager, CPU storage). When that
# happens on an engine thread the exception cannot reach Python: the engine aborts the process with
# "terminate called after throwing an instance of 'dmlc::Error'" followed by one of these in "what():".
OOM_TEXTS = (
    "cudaMalloc failed: out of memory",
    "cudaMalloc retry failed: out of memory",
    "Failed to allocate CPU Memory",
    "CUDA: out of memory",
)


def import_mxnet() -> Any:
    """Import MXNet in this (worker) process, after the one NumPy patch it needs."""
    if "mxnet" not in sys.modules:
        import numpy

        # MXNet 1.9.1 (its last release) still uses the alias ``numpy.bool``, which NumPy 1.24 removed;
        # without it ``import mxnet`` fails. Patched here, in the worker that runs MXNet, never globally.
        if "bool" not in vars(numpy):  # not hasattr(): NumPy 1.2x warns on that lookup
            setattr(numpy, "bool", bool)  # noqa: B010 - numpy 2 stubs type it; MXNet runs on numpy 1.26
    import mxnet

    return mxnet


class MXNetAdapter(GluonLayers, Adapter):
    """MXNet 1.x Gluon, hybridised with static allocation, NCHW."""

    name = "mxnet"
    label = "MXNet"
    distributions = ("mxnet", "mxnet-cu112", "mxnet-cu117", "mxnet-cu110", "mxnet-cu102", "mxnet-mkl")
    import_name = "mxnet"
    api_version = API_VERSION

    @classmethod
    def import_framework(cls) -> Any:
        """MXNet, imported after its NumPy patch (:func:`import_mxnet`)."""
        return import_mxnet()

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        """The installed build's device, from its metadata (:func:`adapters.mxnet.build.gpu_build`)."""
        return build.gpu_build()
    oom_stderr_patterns = OOM_TEXTS
    supports_accumulation = True
    bn_running_variance = "biased"  # MXNet's BatchNorm updates running_var with the biased batch variance
    #: fp32 only, measured (docs/precision.md): MXNet 1.9.1's AMP does not train here
    math_modes = ("ieee",)  # by environment switches only (adapters/mxnet/mathmode.py)
    math_mode_note = mathmode.NOTE
    precision_note = ("MXNet 1.9.1's AMP (mxnet.contrib.amp) is not run: float16 AMP needs a CUDA build of MXNet, "
                      "which this project has not verified it on, and its bfloat16 needs oneDNN's AVX-512 kernels")
    precision_notes = {
        ("bf16", "cpu"): "MXNet 1.9.1's bfloat16 AMP, amp.init(target_dtype='bfloat16'), runs convolutions through "
                         "oneDNN only, which needs AVX-512: measured on an AVX2 CPU, the first training step fails "
                         "with 'could not create a primitive descriptor iterator' (and, with oneDNN off, 'Unknown "
                         "type enum 12' in the native convolution)",
    }

    def __init__(self) -> None:
        self.mx: Any = None
        self.ctx: Any = None
        self.gpu = False
        self.net: Any = None
        self.trainer: Any = None
        self.loss_fn: Any = None
        self._params: list[tuple[Any, bool]] = []  # (gluon Parameter, stored transposed?) in canonical order
        self._used_at_reset_mib: float | None = None
        self._accumulated: list[Any] | None = None  # summed gradients of an unfinished accumulated update
        self._seen_dtype: str | None = None  # the logits' dtype in the latest training forward pass
        self._ahead_thread = threading.local()  # per thread: the prefetch thread's OpenMP team was set to one

    def versions(self) -> dict[str, str]:
        # Read from the installed metadata, not by importing: MXNet fixes its thread pools at import,
        # and setup() must set OMP_NUM_THREADS first (the worker asks for versions before setup).
        out: dict[str, str] = {}
        for dist in self.distributions:
            try:
                out["mxnet"] = md.version(dist)
                if dist != "mxnet":
                    out["mxnet_distribution"] = dist
                break
            except md.PackageNotFoundError:
                continue
        if "mxnet" not in out:
            out["mxnet"] = str(import_mxnet().__version__)
        return out

    def setup(self, runtime: RuntimeConfig) -> SetupFacts:
        if runtime.threads and "mxnet" not in sys.modules:
            # MXNet sizes its OpenMP pool and CPU worker threads when it is imported, from these variables.
            os.environ["OMP_NUM_THREADS"] = str(runtime.threads)
            os.environ["MXNET_CPU_WORKER_NTHREADS"] = "1"
        if runtime.denormals == "flush" and "mxnet" not in sys.modules:
            # MXNet has no API for denormals: FTZ/DAZ set on this thread before the import are inherited by
            # the engine's and OpenMP's threads, which it creates at import (measured: 27 -> 3.7 ms per step)
            fpenv.set_cpu_flush(True)
        cpu_denormals = fpenv.cpu_denormals_state()
        if runtime.denormals == "flush" and cpu_denormals != "flush":
            raise ConfigError("MXNet has no API to flush denormals, and FTZ/DAZ could not be set on the CPU "
                              "before MXNet was imported (needs x86-64 Linux, and a process that has not "
                              "imported mxnet yet); use denormals = 'framework-default'")
        mathmode.apply(runtime.math_mode)  # before MXNet's operators first read their switches
        mx = import_mxnet()
        self.mx = mx
        omp_told = single_omp_thread_here()
        want_gpu = self.resolve_gpu(
            runtime,
            mx.context.num_gpus() > 0,
            "mx.context.num_gpus() is 0: the CPU build 'mxnet', or no CUDA driver",
            remedy="install a CUDA build such as mxnet-cu112 in its own environment and point "
            "[adapters.mxnet] python at it",
        )
        if want_gpu and runtime.memory_limit_mib:
            raise ConfigError(
                "MXNet cannot emulate a smaller GPU: it has no per-process memory cap "
                "(its pooled allocator takes what the card has). Run the max-batch search "
                "for mxnet without memory_limit_mib, on the card you want to measure"
            )
        self.validate_precision(runtime.precision, "gpu" if want_gpu else "cpu")
        self.gpu = want_gpu
        self.ctx = mx.gpu(0) if want_gpu else mx.cpu()
        features = mx.runtime.Features()
        info: dict[str, Any] = {
            "device": str(self.ctx),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "cuda": features.is_enabled("CUDA"),
            "cudnn": features.is_enabled("CUDNN"),
            "mkldnn": features.is_enabled("MKLDNN"),
            "cpu_denormals": cpu_denormals,
            "python_thread_omp_threads": 1 if omp_told else None,
            "math_mode_seen": mathmode.read(want_gpu),
        }
        if want_gpu:
            free, total = mx.context.gpu_memory_info(0)
            info["gpu_total_mib"] = total / MIB
        return SetupFacts.from_dict(info)

    def make_sgd(self, spec: OptimizerSpec) -> tuple[str, dict[str, Any]]:
        # MXNet SGD: state = m*state - lr*(rescale_grad*g + wd*w); w += state. That is Keras' form,
        # equal to PyTorch's for a constant lr, and after a change because set_learning_rate rescales the state.
        # wd is 0 by default; rescale_grad is set by Trainer.step(batch_size) to 1/batch_size, turning the summed
        # per-sample gradients into a mean.
        return "sgd", {"learning_rate": spec.lr, "momentum": spec.momentum, "wd": 0.0}

    def make_adam(self, spec: OptimizerSpec) -> tuple[str, dict[str, Any]]:
        return "adam", {"learning_rate": spec.lr, "beta1": spec.adam_betas[0], "beta2": spec.adam_betas[1],
                        "epsilon": spec.adam_eps, "wd": 0.0}

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        mx = self.mx
        from mxnet import gluon

        net = self._net
        # Any initializer would do: every trainable array is overwritten below; BN's running mean and
        # variance keep Gluon's zeros/ones, the description's convention too.
        net.initialize(mx.init.Zero(), ctx=self.ctx)
        for param, transposed, array in self._pending:
            value = np.ascontiguousarray(array.T if transposed else array, dtype=np.float32)
            check_fits(value.shape, param.shape, param.name)
            param.set_data(mx.nd.array(value, ctx=self.ctx))
        net.hybridize(static_alloc=True, static_shape=True)
        self.net, self._params = net, [(p, t) for p, t, _ in self._pending]
        opt_name, opt_args = optimizer
        self.trainer = gluon.Trainer(net.collect_params(), opt_name, opt_args, kvstore=None)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=True, from_logits=False)

    def param_count(self) -> int:
        return int(
            sum(int(np.prod(p.shape)) for p in self.net.collect_params().values() if p.grad_req != "null")
        )

    def get_weights(self) -> list[np.ndarray]:
        out = []
        for param, transposed in self._params:
            array = param.data(self.ctx).asnumpy()
            out.append(np.ascontiguousarray(array.T) if transposed else array.copy())
        return out

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(b.running_mean.data(self.ctx).asnumpy(), b.running_var.data(self.ctx).asnumpy()) for b in self._bn]

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        mx = self.mx
        xb = mx.nd.array(np.asarray(x, dtype=np.float32), ctx=self.ctx, dtype=np.float32)
        yb = mx.nd.array(np.asarray(y), ctx=self.ctx, dtype=np.float32)  # Gluon's sparse labels are float
        mx.nd.waitall()
        return xb, yb

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        """:meth:`prepare_batch` on the worker's prefetch thread while the previous step runs, as Gluon's
        ``DataLoader`` hands its users NDArrays made ahead: the conversion (and, on a GPU, the copy to the context)
        is the engine's synchronous copy of these two arrays, waited for here by these arrays alone.

        Two things differ from :meth:`prepare_batch`, both so that it does not slow the step it overlaps:

        * one OpenMP thread for this thread, set once per thread (:func:`single_omp_thread_here`). A copy of over
          MXNet's parallel-copy size (200,000 floats: batch 256 of 3x32x32) is an OpenMP loop, and on a thread that
          was not told, libgomp starts a team of ``OMP_NUM_THREADS`` for it beside the engine's (the pitfall of
          issue 12, which held the harness at 0.75 of a bare loop); told, the copy runs on this thread;
        * no ``mx.nd.waitall()``: that waits for every operation in the engine, the running step's too, and would
          serialise the two threads again. ``wait_to_read`` waits for these arrays' copies only.
        """
        if not getattr(self._ahead_thread, "omp_told", False):
            single_omp_thread_here()
            self._ahead_thread.omp_told = True
        mx = self.mx
        xb = mx.nd.array(np.asarray(x, dtype=np.float32), ctx=self.ctx, dtype=np.float32)
        yb = mx.nd.array(np.asarray(y), ctx=self.ctx, dtype=np.float32)
        xb.wait_to_read()
        yb.wait_to_read()
        return xb, yb

    def train_step(self, batch: Any) -> None:
        self.train_step_queued(batch)
        self.mx.nd.waitall()  # the engine is asynchronous: the update must be done before the clock is read

    def set_learning_rate(self, lr: float) -> None:
        """The optimizer's states are kept (momentum, Adam's moments). MXNet's SGD momentum has the rate inside it
        (``sgd_mom_update``: ``mom = m mom - lr g; w += mom``, so ``mom = -lr b`` for PyTorch's buffer
        ``b = m b + g``): it is scaled by new/old here, so that the new rate applies to the whole momentum at once, as
        in PyTorch, and not only to the gradients from now on (docs/adapters.md, "Learning-rate changes")."""
        old = float(self.trainer.learning_rate)
        self.trainer.set_learning_rate(lr)
        optimizer = self.trainer.optimizer
        if not (isinstance(optimizer, self.mx.optimizer.SGD) and optimizer.momentum and old > 0 and lr != old):
            return
        # kvstore=None (end_model): the states live in the trainer's updaters, one per context, created at the
        # first step (before it there is nothing to scale); a multi-precision state is (momentum, float32 weights)
        for updater in self.trainer._updaters:
            for state in updater.states.values():
                momentum = state[0] if isinstance(state, (tuple, list)) else state
                if momentum is not None:
                    momentum *= lr / old

    def train_step_queued(self, batch: Any) -> None:
        """The step pushed to MXNet's engine, not waited for: the worker queues a few and waits once
        (:meth:`wait_steps`), as a Gluon loop that reads its loss every few batches does. A wait after every step
        cost 1.4-3.7 % of a CPU step at batch 64 (docs/benchmarks.md, issue 40)."""
        mx = self.mx
        x, y = batch
        with mx.autograd.record():
            loss = self._forward_loss(x, y)
        loss.backward()  # of the per-sample losses: gradients of their sum
        self.trainer.step(x.shape[0])  # divides by the batch size: gradients of the mean loss

    def wait_steps(self) -> None:
        self.mx.nd.waitall()  # every queued operation done; an error of one (out of memory) is raised here

    def _forward_loss(self, x: Any, y: Any) -> Any:
        """The per-sample losses of one forward pass (inside ``record()``); records the logits' dtype."""
        logits = self.net(x)
        self._seen_dtype = np.dtype(logits.dtype).name  # read from the array's header: no wait on the engine
        return self.loss_fn(logits, y)

    def precision_seen(self) -> PrecisionSeen | None:
        return PrecisionSeen(self._seen_dtype) if self._seen_dtype is not None else None

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        mx = self.mx
        x, y = batch
        with mx.autograd.record():
            loss = self._forward_loss(x, y)
        loss.backward()  # grad_req "write": each backward overwrites, so the sum is kept beside the parameters
        scale = weight / x.shape[0]  # gradients of the summed losses -> weight x gradients of their mean
        params = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        if self._accumulated is None:
            self._accumulated = [p.grad(self.ctx) * scale for p in params]
        else:
            for acc, p in zip(self._accumulated, params, strict=True):
                acc += p.grad(self.ctx) * scale
        mx.nd.waitall()

    def apply_accumulated(self) -> None:
        params = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        for acc, p in zip(self._accumulated or [], params, strict=True):
            p.grad(self.ctx)[:] = acc
        self.trainer.step(1)  # the gradients already are the mean over the update: no rescaling
        self._accumulated = None
        self.mx.nd.waitall()

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean loss's gradient: one forward in ``record()`` (training mode: BatchNorm uses the batch's
        statistics) and ``backward()``, with no ``trainer.step``. The backward writes the parameters' gradient
        buffers, which the next step's backward overwrites (grad_req "write"; an accumulation in progress keeps its
        sum apart, in ``_accumulated``); BatchNorm's running statistics, which the training-mode forward moves,
        are put back as they were."""
        mx = self.mx
        xb, yb = self.prepare_batch(x, y)
        running = [p for p in self.net.collect_params().values() if p.grad_req == "null"]
        saved = [p.data(self.ctx).copy() for p in running]
        try:
            with mx.autograd.record():
                loss = self._forward_loss(xb, yb)
            loss.backward()  # gradients of the summed per-sample losses
            scale = 1.0 / xb.shape[0]
            out = []
            for param, transposed in self._params:
                grad = param.grad(self.ctx).asnumpy().astype(np.float64) * scale
                out.append((grad.T if transposed else grad).ravel())
        finally:
            for param, value in zip(running, saved, strict=True):
                param.set_data(value)
            mx.nd.waitall()
        return np.concatenate(out) if out else np.zeros(0)

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        return np.asarray(self.net(x).asnumpy(), dtype=np.float32)  # outside record(): inference mode

    def _device_used_mib(self) -> float:
        free, total = self.mx.context.gpu_memory_info(0)
        return (total - free) / MIB

    def reset_memory_stats(self) -> None:
        if self.gpu:
            self.mx.nd.waitall()
            self._used_at_reset_mib = self._device_used_mib()

    def memory_stats(self) -> MemoryStats:
        if not self.gpu:
            return MemoryStats(
                peak_mib=None,
                source="none: MXNet 1.9 exposes no CPU allocator peak to Python "
                "(its profiler's memory counters go to a trace file only)",
            )
        self.mx.nd.waitall()
        at_start = self._used_at_reset_mib
        start_text = f"{at_start:.0f} MiB" if at_start is not None else "not taken"
        # reserved_mib stays None: MXNet does not tell allocated from pooled-but-free memory.
        return MemoryStats(
            peak_mib=self._device_used_mib(),
            source="mx.context.gpu_memory_info: device-level used memory at the end of the window "
            f"(at its start: {start_text}); MXNet's pooled allocator keeps freed blocks, so this is its "
            "high-water mark, plus the CUDA context and any other process on the card",
        )

    def is_oom(self, exc: BaseException) -> bool:
        from mxnet.base import MXNetError

        if isinstance(exc, MXNetError):
            text = str(exc)
            return "out of memory" in text.lower() or any(t in text for t in OOM_TEXTS)
        return is_generic_oom(exc)

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        # Copied from real failures (CPU storage under RLIMIT_AS; the pooled GPU storage manager).
        import_mxnet()
        from mxnet.base import MXNetError

        return (
            [
                MXNetError(
                    'Traceback (most recent call last):\n  File "../src/storage/./cpu_device_storage.h", '
                    "line 74\nMXNetError: Failed to allocate CPU Memory"
                ),
                MXNetError("[18:53:03] src/storage/./pooled_storage_manager.h:157: cudaMalloc failed: out of memory"),
                MXNetError("cudaMalloc retry failed: out of memory"),
            ],
            [ValueError("shapes (3,) and (4,) not aligned"),
             MXNetError("Check failed: shape mismatch: (8,5) vs (8,3)")],
        )

    def close(self) -> None:
        if self.mx is not None:
            self.mx.nd.waitall()
        self.net = self.trainer = None
