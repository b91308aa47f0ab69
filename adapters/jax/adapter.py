"""JAX adapter: a pure function built from the shared description, one jitted step per batch size, NCHW.

The model is a list of layer functions over a flat list of parameters kept in the canonical layouts of
:mod:`harness.models` (conv kernels OIHW, Dense kernels (in, units)), so weights round-trip with no
conversion. BatchNorm's running statistics live in a separate state list and follow PyTorch's
conventions, which the contract suite compares against: the running variance is updated with the
unbiased batch variance, and the description's ``momentum`` is the weight of the running statistic.

Three things differ from the other adapters and are why this module looks the way it does:

* **Compilation.** ``jax.jit`` compiles once per input shape. An epoch's short last batch is a new
  shape, so :meth:`JAXAdapter.prepare_batch` (outside the worker's step clock) compiles the step for a
  batch size it has not seen, ahead of time; :meth:`JAXAdapter.train_step` only runs compiled code.
* **Asynchronous dispatch.** A jitted call returns before XLA has finished; ``train_step`` blocks on the
  new parameters and optimizer state (``jax.block_until_ready``) before it returns.
* **Process-wide settings.** Threads, GPU preallocation and the memory cap are environment variables
  and CPU affinity that XLA reads when its backend starts, so :meth:`JAXAdapter.setup` sets them before
  the first JAX call, and :meth:`JAXAdapter.versions` reads package metadata instead of importing JAX.

``jax`` is imported inside methods only.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import threading
import time
from typing import Any

import numpy as np

from adapters import gpumem
from adapters.base import (
    API_VERSION,
    Adapter,
    CompileStats,
    EvalResult,
    MemoryStats,
    OptimizerSpec,
    PrecisionSeen,
    RuntimeConfig,
    SetupFacts,
    is_generic_oom,
)
from adapters.builds import GpuBuild
from adapters.jax import build, mathmode
from adapters.jax import gpu as jax_gpu
from adapters.jax.convert import aligned_copy
from adapters.jax.layers import JaxLayers, LayerFn, chain
from adapters.jax.threads import limit_threads, release_this_thread
from harness.errors import ConfigError
from harness.models import ModelDescription

MIB = 1024.0 * 1024.0
MEMORY_MODES = ("growth", "preallocate")
# What XLA writes when an allocation fails. CPU: "INTERNAL: ... Out of memory allocating N bytes" (not
# RESOURCE_EXHAUSTED, as one would guess); GPU (BFC allocator): "RESOURCE_EXHAUSTED: Out of memory
# while trying to allocate N bytes".
OOM_TEXTS = ("Out of memory allocating", "Out of memory while trying to allocate", "RESOURCE_EXHAUSTED")


class JAXAdapter(JaxLayers, Adapter):
    """JAX/XLA, a hand-written NCHW network, a jitted SGD-momentum or Adam step."""

    name = "jax"
    label = "JAX"
    distributions = ("jax",)
    import_name = "jax"
    framework_modules = ("jaxlib",)
    api_version = API_VERSION

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        """The installed build's device, from its metadata (:func:`adapters.jax.build.gpu_build`)."""
        return build.gpu_build()
    options = {"memory_mode": MEMORY_MODES}
    # growth or preallocation of the GPU pool: nothing on a CPU, and a memory limit replaces it (setup)
    gpu_only_options = options_replaced_by_memory_limit = ("memory_mode",)
    bn_running_variance = "unbiased"  # written by hand, to PyTorch's (the reference's) convention
    compiles_per_shape = True  # one XLA executable per batch size, compiled in prepare_batch
    oom_stderr_patterns = OOM_TEXTS
    math_modes = ("ieee", "tf32")  # jax_default_matmul_precision (adapters/jax/mathmode.py)
    precision_note = ("mixed precision is not implemented in the JAX adapter: its hand-written layers would need "
                      "a cast per layer, float32 master weights and, for float16, a loss scaler of their own")

    def __init__(self) -> None:
        self.jax: Any = None
        self.device: Any = None
        self.cap_mib: float | None = None  # an emulated card: the pool XLA preallocated (MiB)
        self.gpu = False
        self.params: list[Any] = []
        self.state: list[Any] = []
        self.opt_state: Any = None
        self._layers: list[tuple[LayerFn, int, int]] = []  # (function, parameters taken, state entries)
        self._compiled: dict[int, Any] = {}
        self._step: Any = None
        self._loss_fn: Any = None
        self._opt_spec: Any = None  # the spec make_optimizer built from (set_learning_rate rebuilds from it)
        self._infer: Any = None
        self.trace_count = 0  # compilations of the train step: one per batch size seen
        self._ahead_thread = threading.local()  # per thread: released from the CPUs XLA's pools were narrowed to
        self._evaluating = False  # prepare_batch for evaluate() needs no train step compiled
        self._seen_dtype: str | None = None  # the logits' dtype in the traced train step
        self._compile_s = 0.0  # tracing and compiling the train step in prepare_batch
        self._cache_dir: str | None = None  # the persistent compilation cache in use
        self._cache_counts = {"requests": 0, "hits": 0}  # JAX's monitoring events, while the train step compiles
        self._cache_saved_s = 0.0  # the compile time the cache's hits saved, as JAX recorded it
        self._counting = False

    def versions(self) -> dict[str, str]:
        # From metadata, not by importing: XLA reads its threads and memory settings when it starts,
        # and setup() must set them first (the worker asks for versions before setup).
        out = {}
        for dist in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin"):
            try:
                out[dist.replace("-", "_")] = md.version(dist)
            except md.PackageNotFoundError:
                continue
        return out

    def setup(self, runtime: RuntimeConfig) -> SetupFacts:
        self.validate_precision(runtime.precision, runtime.device)  # fp32 everywhere: "auto" decides nothing here
        mode = runtime.options.get("memory_mode", MEMORY_MODES[0])
        if mode not in MEMORY_MODES:
            raise ConfigError(f"jax: memory_mode = {mode!r} is not one of {', '.join(MEMORY_MODES)}")
        info: dict[str, Any] = {}
        if runtime.threads:
            info["cpus"] = limit_threads(runtime.threads)
        # Before the backend starts: XLA reads these once. growth = allocate on demand (TensorFlow's
        # "growth"); preallocate = a pool taken at start; a memory limit preallocates exactly it.
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if mode == "preallocate" else "false"
        environ = jax_gpu.worker_environ()
        jaxlib = jax_gpu.installed_version("jaxlib")
        gpu = None if runtime.device == "cpu" else jax_gpu.visible_gpu(environ)
        missing = None if runtime.device == "cpu" else gpumem.pynvml_missing("the GPU's memory (XLA's default "
                                                                             "fraction, 75 %, applies)")
        if missing:
            info["gpu_memory_source"] = missing
        if gpu is not None and runtime.memory_limit_mib:
            mode = self._cap_gpu_memory(float(runtime.memory_limit_mib), gpu, jaxlib, info, runtime.context_hint_mib)
        elif gpu is not None:  # the whole card, not XLA's default 75 % of it
            fraction, budget = jax_gpu.whole_card_fraction(gpu, preallocate=mode == "preallocate")
            info.update(jax_gpu.settle_fraction_variables(jaxlib, environ, fraction),
                        memory_fraction=fraction, memory_budget=budget)
        else:  # exactly one variable even so: the user's own two would stop a GPU backend that 'auto' starts
            info.update(jax_gpu.settle_fraction_variables(jaxlib, environ))
        import jax

        self.jax = jax
        if runtime.device == "cpu":
            jax.config.update("jax_platforms", "cpu")  # never start a GPU backend for a CPU trial
        elif runtime.device == "gpu":
            # CUDA or nothing: a backend that fails to start raises with its cause instead of JAX falling back
            # to the CPU and the trial finding "no GPU" for the wrong reason
            jax.config.update("jax_platforms", "cuda")
        if runtime.compile_cache_dir:
            self._use_compile_cache(runtime.compile_cache_dir, info)
        gpus, cause = ([], "") if runtime.device == "cpu" else _gpu_devices(jax)
        evidence = "jax.devices('gpu') finds none"
        if runtime.device != "cpu" and not gpus:  # the cause JAX gave, and the extra that fits this CUDA
            evidence += ": " + jax_gpu.no_gpu_remedy(cause, jax_gpu.installed_plugins(), jax_gpu.cuda_extra())
        self.gpu = self.resolve_gpu(runtime, bool(gpus), evidence)
        if not self.gpu:
            for key in ("memory_limit_mib", "memory_fraction", "memory_budget"):
                info.pop(key, None)
            mode = "preallocate (no effect on CPU)" if mode == "preallocate" else MEMORY_MODES[0]
        self.device = gpus[0] if self.gpu else jax.devices("cpu")[0]
        if self.gpu:  # a CPU trial runs exactly as before math modes (recorded n/a)
            mathmode.apply(jax, runtime.math_mode)
        info["math_mode_seen"] = mathmode.read(jax, self.device if self.gpu else None)
        info.update(device=str(self.device), platform=self.device.platform, memory_mode=mode,
                    threads=runtime.threads or len(os.sched_getaffinity(0)))
        if self.gpu:
            stats = self.device.memory_stats() or {}
            info["gpu_name"] = self.device.device_kind
            if "bytes_limit" in stats:
                info["xla_bytes_limit_mib"] = stats["bytes_limit"] / MIB
        return SetupFacts.from_dict(info)

    def _use_compile_cache(self, directory: str, info: dict[str, Any]) -> None:
        """JAX's persistent compilation cache in ``directory``, for every program however small or quick to compile
        (JAX's defaults skip those under 1 s), and its monitoring events counted to tell a cold cache from a warm
        one: ``compile_requests_use_cache`` per compilation that consulted it, ``cache_hits`` per one it served."""
        jax = self.jax
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:  # the cache is an optimisation: a trial runs without it, and says so
            info["compile_cache_note"] = f"no compilation cache: {directory}: {e.strerror or e}"
            return
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size threshold at all
        jax.monitoring.register_event_listener(self._on_event)
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        self._cache_dir = info["compile_cache_dir"] = directory

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if self._counting and event == "/jax/compilation_cache/compile_requests_use_cache":
            self._cache_counts["requests"] += 1
        elif self._counting and event == "/jax/compilation_cache/cache_hits":
            self._cache_counts["hits"] += 1

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if self._counting and event == "/jax/compilation_cache/compile_time_saved_sec":
            self._cache_saved_s += max(0.0, duration)

    def compile_stats(self) -> CompileStats | None:
        """Seconds tracing and compiling the train step so far, and whether the persistent cache served them all
        (``warm``), not all (``cold``) or was not used (``off``: none set, or JAX consulted it for nothing).
        ``cold_s`` of a warm one adds what JAX says its hits saved, which JAX reckons from compile times it stores in
        whole seconds: a lower bound, short of the truth by under a second per compiled step (none for a step that
        compiled in under one)."""
        if not self.trace_count:
            return None
        requests, hits = self._cache_counts["requests"], self._cache_counts["hits"]
        if self._cache_dir is None or requests == 0:
            return CompileStats(compile_s=self._compile_s, cache="off", cold_s=self._compile_s)
        return CompileStats(compile_s=self._compile_s, cache="warm" if hits >= requests else "cold",
                            cold_s=self._compile_s + self._cache_saved_s)

    def _compile_step(self, *args: Any) -> Any:
        """The train step compiled for these arguments' shapes, timed and its cache events counted."""
        t0 = time.perf_counter()
        self._counting = True
        try:
            compiled = self._step.lower(*args).compile()
        finally:
            self._counting = False
        self._compile_s += time.perf_counter() - t0
        self.trace_count += 1
        return compiled

    def _cap_gpu_memory(self, limit_mib: float, gpu: jax_gpu.VisibleGPU, jaxlib: str | None,
                        info: dict[str, Any], hint_mib: float | None = None) -> str:
        """Emulate a card of ``limit_mib``: preallocate the card less the CUDA context, so XLA's allocator can use
        no more and the process holds what it would on a real card of that size (issue 31).

        XLA reads the fraction when its GPU backend starts, so this runs before JAX is first used, before the
        context exists: the context taken off is an earlier probe's (:func:`adapters.gpumem.hinted_context`). The
        card's total is that of the GPU the worker sees (``CUDA_VISIBLE_DEVICES``), from NVML.
        """
        context = gpumem.hinted_context(hint_mib)
        self.cap_mib = gpumem.emulated_cap_mib(limit_mib, context)
        fraction = min(1.0, self.cap_mib / gpu.total_mib)
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true"
        info.update(jax_gpu.settle_fraction_variables(jaxlib, jax_gpu.worker_environ(), fraction))
        info.update(memory_limit_mib=limit_mib, memory_fraction=fraction, memory_cap_mib=self.cap_mib,
                    cuda_context_setup_mib=context.mib, cuda_context_source=context.source)
        info["memory_budget"] = (f"{self.cap_mib:.0f} MiB preallocated of {gpu.label}'s {gpu.total_mib:.0f} MiB "
                                 f"(a {limit_mib:.0f} MiB card less {context.mib or 0:.0f} MiB of CUDA context)")
        return f"limit:{int(limit_mib)}"

    def make_sgd(self, spec: OptimizerSpec) -> Any:
        from adapters.jax.optim import sgd_momentum

        self._opt_spec = spec
        return sgd_momentum(self.jax, spec)

    def make_adam(self, spec: OptimizerSpec) -> Any:
        from adapters.jax.optim import adam

        self._opt_spec = spec
        return adam(self.jax, spec)

    def set_learning_rate(self, lr: float) -> None:
        """The rate is a constant of the compiled step: a new step function with the new rate's update (the optimizer
        state, of the same structure, is kept), compiled for each batch size when one is next prepared."""
        if lr == self._opt_spec.lr:
            return
        _, update = self.make_optimizer(dataclasses.replace(self._opt_spec, lr=lr))
        self._jit_step(update)
        self._compiled.clear()

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        jax = self.jax
        put = self._put
        self.params = [put(w) for w in self._weights]
        self.state = [put(s) for s in self._state0]
        init, update = optimizer
        self.opt_state = init(self.params)
        forward, _, _ = chain(list(self._layers))

        def loss_fn(params: list[Any], state: list[Any], x: Any, y: Any) -> tuple[Any, list[Any]]:
            logits, new_state = forward(params, state, x, True)
            self._seen_dtype = str(logits.dtype)  # while tracing: the dtype of the compiled step's logits
            logp = jax.nn.log_softmax(logits)
            return -jax.numpy.take_along_axis(logp, y[:, None], axis=1).mean(), new_state

        self._loss_fn = loss_fn
        self._jit_step(update)
        self._infer = jax.jit(lambda params, state, x: forward(params, state, x, False)[0])
        # the gradient alone: the BatchNorm state it returns (as aux) is dropped, the parameters are not donated
        self._gradient = jax.jit(lambda params, state, x, y: jax.grad(loss_fn, has_aux=True)(params, state, x, y)[0])

    def _jit_step(self, update: Any) -> None:
        """The jitted train step with the optimizer update ``update`` (its learning rate is a constant in it)."""
        jax, loss_fn = self.jax, self._loss_fn

        def step(params: list[Any], state: list[Any], opt_state: Any, x: Any, y: Any) -> tuple[Any, ...]:
            (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
            new_params, new_opt = update(params, grads, opt_state)
            return new_params, new_state, new_opt, loss

        # Donating the old parameters and optimizer state lets XLA update them in place, as the other
        # frameworks' optimizers do: without it the step's peak memory holds two copies of both.
        self._step = jax.jit(step, donate_argnums=(0, 1, 2))

    def precision_seen(self) -> PrecisionSeen | None:
        return PrecisionSeen(self._seen_dtype) if self._seen_dtype is not None else None

    def _put(self, array: np.ndarray) -> Any:
        return self.jax.device_put(np.asarray(array), self.device)

    def param_count(self) -> int:
        return int(sum(int(np.prod(p.shape)) for p in self.params))

    def get_weights(self) -> list[np.ndarray]:
        return [np.array(p, dtype=np.float32) for p in self.params]

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.array(self.state[i]), np.array(self.state[i + 1])) for i in range(0, len(self.state), 2)]

    def _put_batch(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """A batch on the device. On a CPU from 64-byte-aligned host arrays, which XLA takes without a copy: it
        copies an unaligned one of over 100 KiB (batch 64 of 1x28x28) as a task of its CPU thread pool, queued
        behind a step that is running there, so that a batch prepared ahead waited for the step's end and the
        training thread for it (issue 40, measured: half the prefetched batches late, by 4-9 ms on a loaded machine).
        """
        if not self.gpu:
            x, y = aligned_copy(x, np.float32), aligned_copy(y, np.int32)
        return self._put(np.ascontiguousarray(x, dtype=np.float32)), self._put(np.ascontiguousarray(y, dtype=np.int32))

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        jax = self.jax
        xb, yb = self._put_batch(x, y)  # labels as int32: int64 needs jax_enable_x64; labels fit int32
        n = int(xb.shape[0])
        if n not in self._compiled and not self._evaluating:
            # A batch size not seen yet (the first, or an epoch's short last batch): compile here, outside
            # the step clock, so that train_step never includes a compilation.
            self._compiled[n] = self._compile_step(self.params, self.state, self.opt_state, xb, yb)
        jax.block_until_ready((xb, yb))
        return xb, yb

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        """The batch put on the device from the worker's background thread while the previous step runs (JAX's
        transfers are thread-safe) and waited for here. Nothing is compiled: every batch size the training uses was
        compiled on the training thread before (the first batch, and :meth:`prepare_batch` in the worker's
        ``warm_shapes``); one that was not would be compiled by :meth:`train_step`.

        The first call on a thread releases that thread from the CPUs ``threads`` narrowed the process to
        (:func:`adapters.jax.threads.release_this_thread`): XLA's pools stay as wide as asked, and the gathering on
        this thread no longer shares the step's one CPU."""
        if not getattr(self._ahead_thread, "released", False):
            release_this_thread()
            self._ahead_thread.released = True
        xb, yb = self._put_batch(x, y)
        self.jax.block_until_ready((xb, yb))
        return xb, yb

    def train_step(self, batch: Any) -> None:
        x, y = batch
        step = self._compiled.get(int(x.shape[0]))
        if step is None:  # a batch that did not come from prepare_batch
            step = self._compiled[int(x.shape[0])] = self._compile_step(self.params, self.state, self.opt_state, x, y)
        self.params, self.state, self.opt_state, loss = step(self.params, self.state, self.opt_state, x, y)
        # Dispatch is asynchronous: wait for the update itself before the caller reads its clock.
        self.jax.block_until_ready((self.params, self.state, self.opt_state, loss))

    def estimate_step_memory(self, batch: int) -> int | None:
        """One training step's peak at ``batch`` from XLA's own buffer assignment: the step lowered for abstract
        arguments (``jax.ShapeDtypeStruct``: nothing of the batch's size is allocated), compiled, and its
        ``memory_analysis()`` read as temporaries + arguments + outputs - what the donated arguments alias (the
        parameters and optimizer state are updated in place). None where XLA reports no sizes: some jaxlib
        versions answered zeros on a GPU. Not counted: the allocator's pool and fragmentation (on a GPU), the
        runtime, compiled code."""
        jax = self.jax
        abstract = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                          (self.params, self.state, self.opt_state))
        x = jax.ShapeDtypeStruct((batch, *self.model_input_shape), np.float32)
        y = jax.ShapeDtypeStruct((batch,), np.int32)
        seen = self._seen_dtype  # tracing sets it: the training's own reading stays
        try:  # a size the trial compiled already (its own batch) costs no second compilation
            compiled = self._compiled.get(batch) or self._step.lower(*abstract, x, y).compile()
            stats = compiled.memory_analysis()
        finally:
            self._seen_dtype = seen
        if stats is None:
            return None
        total = (int(stats.temp_size_in_bytes) + int(stats.argument_size_in_bytes) + int(stats.output_size_in_bytes)
                 - int(stats.alias_size_in_bytes))
        return total if total > 0 and stats.temp_size_in_bytes > 0 else None

    def evaluate(self, x: np.ndarray, y: np.ndarray, batch_size: int) -> EvalResult:
        self._evaluating = True
        try:
            return super().evaluate(x, y, batch_size)
        finally:
            self._evaluating = False

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean loss's gradient at the current parameters; BatchNorm normalises with the batch's statistics,
        and the running ones it would update are discarded (``self.state`` is not touched)."""
        xb = self._put(np.ascontiguousarray(x, dtype=np.float32))
        yb = self._put(np.ascontiguousarray(y, dtype=np.int32))
        grads = self._gradient(self.params, self.state, xb, yb)
        arrays = [np.asarray(g, dtype=np.float64).ravel() for g in grads]  # canonical layouts already
        return np.concatenate(arrays) if arrays else np.zeros(0)

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        return np.asarray(self._infer(self.params, self.state, x), dtype=np.float32)

    def reset_memory_stats(self) -> None:
        # XLA has no way to reset its peak (Device.memory_stats' peak_bytes_in_use counts from the start
        # of the process). One trial per process makes that peak the trial's: setup and build included.
        return None

    def memory_stats(self) -> MemoryStats:
        stats = self.device.memory_stats() if self.device is not None else None
        if not stats or "peak_bytes_in_use" not in stats:
            return MemoryStats(peak_mib=None, source="none: XLA's CPU client keeps no allocator statistics "
                               "(Device.memory_stats() is None on CPU)")
        return MemoryStats(
            peak_mib=stats["peak_bytes_in_use"] / MIB,
            source="jax Device.memory_stats()['peak_bytes_in_use'] since the process started (XLA cannot "
            "reset its peak; one trial per process)",
            reserved_mib=stats.get("pool_bytes", stats.get("bytes_reserved", 0)) / MIB or None,
            # beyond the allocator: under a cap XLA preallocated exactly the cap; without one nothing is claimed
            context_mib=gpumem.context_mib(self.cap_mib).mib if self.gpu and self.cap_mib else None,
        )

    def is_oom(self, exc: BaseException) -> bool:
        jax = self.jax
        if jax is not None and isinstance(exc, jax.errors.JaxRuntimeError):
            text = str(exc)
            return any(t in text for t in OOM_TEXTS) or "out of memory" in text.lower()
        return is_generic_oom(exc)

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        import jax

        err = jax.errors.JaxRuntimeError
        return (
            [
                err("INTERNAL: Out of memory allocating 3010560000 bytes."),
                err("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2147483648 bytes."),
            ],
            [ValueError("shapes (3,) and (4,) not aligned"),
             err("INVALID_ARGUMENT: Executable expected shape f32[8,5] for argument 3 but got f32[8,3]")],
        )

    def close(self) -> None:
        self._compiled = {}
        self._step = self._infer = None
        self.params, self.state, self.opt_state = [], [], None


def _gpu_devices(jax: Any) -> tuple[list[Any], str]:
    """(JAX's GPUs, why there are none): the backend's own error where it did not start."""
    try:
        return list(jax.devices("gpu")), ""
    except (RuntimeError, AssertionError) as e:
        # RuntimeError: "Unknown backend: 'gpu' requested" or the CUDA plugin's start failure; under
        # jax_platforms = 'cuda' with no CUDA plugin registered, jax 0.7 fails an assertion (no backend at all)
        text = str(e).strip()
        return [], text.splitlines()[0][:300] if text else "JAX has no 'cuda' backend registered"
