"""TensorFlow adapter: Keras 3 layers, NHWC inside, one ``tf.function`` train step traced once.

The model description and its weights are NCHW / C-major (see :mod:`harness.models`); TensorFlow's
CPU and GPU kernels prefer NHWC, so this adapter converts at its edges: batches are transposed in
:meth:`TensorFlowAdapter.prepare_batch`, conv kernels go from (out, in, k, k) to (k, k, in, out), and
the rows of a Dense kernel that reads a Flatten are permuted from the canonical (C, H, W) order to the
(H, W, C) order Keras' Flatten produces. :meth:`TensorFlowAdapter.get_weights` undoes all of it, so
weights compare one for one with the NCHW frameworks. ``tensorflow`` is imported inside methods only.

Precision (docs/precision.md): ``bf16`` sets Keras' global dtype policy to ``mixed_bfloat16`` and ``amp`` (GPU
only) to ``mixed_float16``, in :meth:`TensorFlowAdapter.setup` (so in the worker, before any layer is built), with
the optimizer wrapped in a ``LossScaleOptimizer`` for float16. A weightless last layer casts the logits to float32,
as Keras' mixed-precision guide asks, so the softmax and the loss are float32; it also records the dtype the logits
arrived in, which is what the worker checks against the precision asked for.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from adapters import gpumem
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
from adapters.tensorflow import build, mathmode
from adapters.tensorflow.convert import Converter
from adapters.tensorflow.layers import KerasLayers, float32_logits
from harness.errors import ConfigError
from harness.models import (
    ModelDescription,
)

MIB = 1024.0 * 1024.0
MEMORY_MODES = ("growth", "preallocate")
#: Keras' dtype policy for each precision
KERAS_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "amp": "mixed_float16"}


def _is_oom_message(text: str) -> bool:
    # What TF's allocators write: "OOM when allocating tensor with shape[...]" (BFC, CPU and GPU) and
    # "Resource exhausted" / "ResourceExhaustedError" in the text of a wrapped graph-execution error.
    return any(
        p in text for p in ("OOM when allocating", "ResourceExhausted", "Resource exhausted", "out of memory")
    )


class TensorFlowAdapter(KerasLayers, Adapter):
    """TensorFlow 2 with Keras 3 layers, NHWC, a traced ``tf.function`` step."""

    name = "tensorflow"
    label = "TensorFlow"
    distributions = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu")
    import_name = "tensorflow"
    framework_modules = ("keras", "tf_keras")
    api_version = API_VERSION

    @classmethod
    def gpu_build(cls) -> GpuBuild | None:
        """The installed build's device, from its metadata (:func:`adapters.tensorflow.build.gpu_build`)."""
        return build.gpu_build()
    options = {"memory_mode": MEMORY_MODES}
    # growth or preallocation of the GPU pool: nothing on a CPU, and a memory limit replaces it (setup)
    gpu_only_options = options_replaced_by_memory_limit = ("memory_mode",)
    bn_running_variance = "biased"  # Keras updates moving_variance with the biased batch variance
    precisions = ("fp32", "amp", "bf16")
    math_modes = ("ieee", "tf32")  # enable_tensor_float_32_execution (adapters/tensorflow/mathmode.py)
    device_precisions = {"cpu": ("fp32", "bf16"), "gpu": ("fp32", "amp", "bf16")}
    precision_notes = {
        ("amp", "cpu"): "Keras' mixed_float16 is for GPUs: a CPU has no float16 units, and Keras' guide names "
                        "mixed_bfloat16 for CPUs, which is precision = 'bf16'",
    }
    oom_stderr_patterns = (
        "OOM when allocating tensor",
        "ResourceExhaustedError",
        "failed to allocate memory",
    )
    supports_accumulation = True

    def __init__(self) -> None:
        self.tf: Any = None
        self.gpu = False
        self.device_name = "/CPU:0"
        self.cap_mib: float | None = None  # an emulated card: what TF's allocator may hold (its logical device's limit)
        self.model: Any = None
        self.optimizer: Any = None
        self._step_fn: Any = None
        self._predict_fn: Any = None
        self._variables: list[Any] = []  # trainable variables, in canonical weight order
        self._from_keras: list[Converter] = []
        self._accumulate_fns: tuple[Any, Any] | None = None  # (add a micro-batch's gradients, apply), made on first use
        self.precision = "fp32"
        self._logits_layer: Any = None  # the float32 cast at the end, which records the dtype it received

    def versions(self) -> dict[str, str]:
        import tensorflow as tf

        out = {"tensorflow": tf.__version__}
        try:
            import keras

            out["keras"] = keras.__version__
        except ImportError:  # Keras ships with TF >= 2.16; an older TF has tf.keras only
            pass
        build = tf.sysconfig.get_build_info()
        for key, label in (("cuda_version", "cuda"), ("cudnn_version", "cudnn")):
            if build.get(key):
                out[label] = str(build[key])
        return out

    def setup(self, runtime: RuntimeConfig) -> SetupFacts:
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # Keras 3 would otherwise obey the user's choice
        import tensorflow as tf

        self.tf = tf
        mode = runtime.options.get("memory_mode", MEMORY_MODES[0])
        if mode not in MEMORY_MODES:
            raise ConfigError(f"tensorflow: memory_mode = {mode!r} is not one of {', '.join(MEMORY_MODES)}")
        # Everything below configures the runtime, so it must run before the first op initialises it.
        if runtime.threads:
            tf.config.threading.set_intra_op_parallelism_threads(runtime.threads)
            tf.config.threading.set_inter_op_parallelism_threads(runtime.threads)
        gpus = tf.config.list_physical_devices("GPU")
        want_gpu = self.resolve_gpu(
            runtime,
            bool(gpus),
            "tf.config.list_physical_devices('GPU') is empty: a CPU-only build such as tensorflow-cpu, "
            "or no CUDA driver",
        )
        info: dict[str, Any] = {}
        if want_gpu:
            gpu = gpus[0]
            tf.config.set_visible_devices([gpu], "GPU")  # one GPU per trial, like the other adapters
            if runtime.memory_limit_mib:
                # A logical device with a hard cap emulates a smaller card; TF refuses memory growth on
                # a device with a logical configuration, so the cap replaces the memory mode. The cap is set before
                # the CUDA context exists, so the context taken off it is an earlier probe's (adapters/gpumem.py)
                info.update(self._cap_memory(tf, gpu, float(runtime.memory_limit_mib), runtime.context_hint_mib))
                mode = f"limit:{int(runtime.memory_limit_mib)}"
            elif mode == "growth":
                tf.config.experimental.set_memory_growth(gpu, True)
            details = tf.config.experimental.get_device_details(gpu)
            info["gpu_name"] = details.get("device_name", gpu.name)
            self.device_name = "/GPU:0"
        else:
            tf.config.set_visible_devices([], "GPU")  # device = 'cpu' means CPU, even on a GPU machine
            self.device_name = "/CPU:0"
            if mode == "preallocate":
                mode = "preallocate (no effect on CPU)"
        self.gpu = want_gpu
        info.update(self._setup_precision(runtime.precision))
        if want_gpu:  # a CPU trial runs exactly as before math modes (recorded n/a)
            mathmode.apply(tf, runtime.math_mode)
        info["math_mode_seen"] = mathmode.read(tf, gpus[0] if want_gpu else None)
        info.update(
            # TensorFlow's CPU kernels run under port::ScopedFlushDenormal (tensorflow/core/platform/denormal.h):
            # it flushes whatever is asked, and has no Python API to stop it, so "framework-default" flushes too
            cpu_denormals="flush",
            device=self.device_name,
            memory_mode=mode,
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        )
        return SetupFacts.from_dict(info)

    def _setup_precision(self, precision: str) -> dict[str, Any]:
        """Keras' global dtype policy for ``precision`` on the resolved device, before any layer is built (the
        policy applies to the layers made after it); set for fp32 too, so an earlier policy cannot leak in."""
        self.validate_precision(precision, "gpu" if self.gpu else "cpu")
        self.precision = precision
        import keras

        keras.mixed_precision.set_global_policy(KERAS_POLICIES[precision])
        return {"precision": precision, "keras_policy": keras.mixed_precision.global_policy().name}

    def precision_seen(self) -> PrecisionSeen | None:
        seen = self._logits_layer.seen_dtype if self._logits_layer is not None else None
        if seen is None:
            return None
        scaling = isinstance(self.optimizer, self.keras.mixed_precision.LossScaleOptimizer)
        return PrecisionSeen(seen, float(self.optimizer.dynamic_scale.numpy()) if scaling else None)

    # ---- the build template's hooks (Adapter.build walks the layers and calls these) ----------------

    def make_sgd(self, spec: OptimizerSpec) -> Any:
        # Keras' momentum (v = m*v - lr*g; w += v) equals PyTorch's (b = m*b + g; w -= lr*b): v = -lr*b for a
        # constant learning rate, and after a change because set_learning_rate rescales v.
        return self.keras.optimizers.SGD(learning_rate=spec.lr, momentum=spec.momentum)

    def make_adam(self, spec: OptimizerSpec) -> Any:
        return self.keras.optimizers.Adam(
            learning_rate=spec.lr, beta_1=spec.adam_betas[0], beta_2=spec.adam_betas[1], epsilon=spec.adam_eps
        )

    def end_model(self, model: ModelDescription, optimizer: Any) -> None:
        tf = self.tf
        self._logits_layer = float32_logits(self.keras)
        with tf.device(self.device_name):
            self.model = self.keras.Model(self._inputs, self._logits_layer(self._x), name=model.name)
        self._logits_layer.seen_dtype = None  # building the model called it symbolically; only training counts
        if self.precision == "amp":  # float16 gradients underflow without loss scaling (dynamic, Keras' default)
            optimizer = self.keras.mixed_precision.LossScaleOptimizer(optimizer)
        assignments: list[tuple[Any, Converter]] = []  # (variable, converter back to canonical)
        for klayer, names, arrays, converters in self._pending:
            for attr, array, (to_keras, from_keras) in zip(names, arrays, converters, strict=True):
                var = getattr(klayer, attr)
                value = to_keras(array)
                check_fits(value.shape, var.shape, klayer.name)
                var.assign(value)
                assignments.append((var, from_keras))
        self._variables = [a[0] for a in assignments]
        self._from_keras = [a[1] for a in assignments]
        self.optimizer = optimizer
        self._compile_steps(model)

    def _compile_steps(self, model: ModelDescription) -> None:
        """The traced train and inference functions (one trace for every batch size)."""
        tf = self.tf
        self.optimizer.build(self.model.trainable_variables)
        self._trace_count = 0
        net, opt = self.model, self.optimizer
        c, h, w = model.input_shape
        signature = [tf.TensorSpec((None, h, w, c), tf.float32), tf.TensorSpec((None,), tf.int64)]

        # input_signature with a None batch dimension: one trace serves every batch size, including an
        # epoch's short last batch, so no step is ever slowed down by a retrace.
        @tf.function(input_signature=signature)
        def step(x: Any, y: Any) -> Any:
            self._trace_count += 1  # Python side effect: runs once per trace, never per call
            with tf.GradientTape() as tape:
                loss = self._loss(net(x, training=True), y)
                scaled = self._scale_loss(loss)
            grads = tape.gradient(scaled, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables, strict=True))  # a LossScaleOptimizer unscales
            return loss

        @tf.function(input_signature=signature[:1])
        def infer(x: Any) -> Any:
            return net(x, training=False)

        @tf.function(input_signature=signature)
        def gradient(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = self._loss(net(x, training=True), y)
                scaled = self._scale_loss(loss)
            grads = tape.gradient(scaled, self._variables)  # canonical order: get_weights' variables
            if scaled is not loss:  # amp: the gradients of the scaled loss, unscaled here
                grads = [g / self.optimizer.dynamic_scale for g in grads]
            return grads

        self._step_fn, self._predict_fn, self._gradient_fn = step, infer, gradient
        self._signature = signature

    def _loss(self, logits: Any, y: Any) -> Any:
        """Mean cross-entropy of float32 logits (the model's last layer casts them)."""
        tf = self.tf
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def _scale_loss(self, loss: Any) -> Any:
        """The loss times the dynamic loss scale under amp (float16); the loss itself otherwise."""
        if isinstance(self.optimizer, self.keras.mixed_precision.LossScaleOptimizer):
            return self.optimizer.scale_loss(loss)
        return loss

    @property
    def trace_count(self) -> int:
        """How many times the train step has been traced (1 after any number of steps, if all is well)."""
        return self._trace_count

    def param_count(self) -> int:
        return int(sum(int(np.prod(v.shape)) for v in self.model.trainable_variables))

    def get_weights(self) -> list[np.ndarray]:
        return [
            np.ascontiguousarray(conv(np.asarray(v.numpy())))
            for v, conv in zip(self._variables, self._from_keras, strict=True)
        ]

    def batchnorm_state(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.array(k.moving_mean.numpy()), np.array(k.moving_variance.numpy())) for k in self._bn]

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        tf = self.tf
        nhwc = np.ascontiguousarray(np.asarray(x, dtype=np.float32).transpose(0, 2, 3, 1))
        with tf.device(self.device_name):
            xt = tf.convert_to_tensor(nhwc)
            yt = tf.convert_to_tensor(np.asarray(y, dtype=np.int64))
            if self.gpu:
                xt, yt = tf.identity(xt), tf.identity(yt)  # copy to the GPU here, outside the timed step
                self.tf.test.experimental.sync_devices()
        return xt, yt

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        """:meth:`prepare_batch` on the worker's background thread while the previous step runs: TensorFlow's eager
        conversion and copy are thread-safe, and ``tf.device`` is a per-thread scope. On a GPU the device-wide
        synchronisation waits for the running step too, so there the copy overlaps the host work, not the step."""
        return self.prepare_batch(x, y)

    def train_step(self, batch: Any) -> None:
        x, y = batch
        with self.tf.device(self.device_name):
            loss = self._step_fn(x, y)
        if self.gpu:
            # GPU kernels run asynchronously: wait for every device before the caller reads its clock.
            self.tf.test.experimental.sync_devices()
        else:
            # On CPU the function returns after its ops ran; reading the scalar loss costs microseconds
            # and makes "the update is finished" explicit rather than an executor detail.
            loss.numpy()

    def set_learning_rate(self, lr: float) -> None:
        """The rate is a variable the traced step reads (a LossScaleOptimizer passes it to its inner one): no retrace,
        state kept. Keras' SGD velocity has the rate inside it (``v = m v - lr g; w += v``, so ``v = -lr b`` for
        PyTorch's buffer ``b = m b + g``): it is scaled by new/old here, so that the new rate applies to the whole
        momentum at once, as in PyTorch, and not only to the gradients from now on (docs/adapters.md,
        "Learning-rate changes"). Adam's moments hold no rate and are left alone."""
        rate = self.optimizer.learning_rate
        old = float(np.asarray(rate))
        rate.assign(lr)
        new = float(np.asarray(rate))  # as the step reads it (float32)
        inner = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        if isinstance(inner, self.keras.optimizers.SGD) and old > 0 and new != old:
            for velocity in getattr(inner, "momentums", ()):  # built at the first step: before it, nothing to scale
                velocity.assign(velocity * (new / old))

    def _make_accumulate_fns(self) -> tuple[Any, Any]:
        """Gradient sums in non-trainable variables beside the weights, and the two traced functions."""
        tf, net, opt = self.tf, self.model, self.optimizer
        with tf.device(self.device_name):
            sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in net.trainable_variables]

        @tf.function(input_signature=[*self._signature, tf.TensorSpec((), tf.float32)])
        def add(x: Any, y: Any, weight: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = self._loss(net(x, training=True), y)
                # under amp the gradients are summed scaled: the scale changes only when apply() runs, so the
                # sum is the scaled sum, which the LossScaleOptimizer unscales (and checks) once per update
                scaled = self._scale_loss(loss)
            for total, grad in zip(sums, tape.gradient(scaled, net.trainable_variables), strict=True):
                total.assign_add(weight * grad)
            return loss

        @tf.function
        def apply() -> Any:
            opt.apply_gradients(zip([tf.identity(s) for s in sums], net.trainable_variables, strict=True))
            for total in sums:
                total.assign(tf.zeros_like(total))
            return opt.iterations

        return add, apply

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        x, y = batch
        if self._accumulate_fns is None:
            self._accumulate_fns = self._make_accumulate_fns()
        with self.tf.device(self.device_name):
            loss = self._accumulate_fns[0](x, y, self.tf.constant(weight, self.tf.float32))
        if self.gpu:
            self.tf.test.experimental.sync_devices()
        else:
            loss.numpy()  # as in train_step: the ops have run once the scalar is read

    def apply_accumulated(self) -> None:
        if self._accumulate_fns is None:
            raise RuntimeError("apply_accumulated() before any accumulate_gradients()")
        with self.tf.device(self.device_name):
            iterations = self._accumulate_fns[1]()
        if self.gpu:
            self.tf.test.experimental.sync_devices()
        else:
            iterations.numpy()

    def flat_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean loss's gradient (a traced function of its own: no optimizer update). BatchNorm runs in training
        mode, normalising with the batch's statistics, which also moves its moving statistics: those (every
        non-trainable variable of the model) are put back as they were."""
        xt, yt = self.prepare_batch(x, y)
        saved = [(v, np.array(v.numpy())) for v in self.model.non_trainable_variables]
        try:
            with self.tf.device(self.device_name):
                grads = self._gradient_fn(xt, yt)
            arrays = [conv(np.asarray(g.numpy(), dtype=np.float64))
                      for g, conv in zip(grads, self._from_keras, strict=True)]
        finally:
            for var, value in saved:
                var.assign(value)
        return np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0)

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        with self.tf.device(self.device_name):
            return np.asarray(self._predict_fn(x).numpy(), dtype=np.float32)

    def reset_memory_stats(self) -> None:
        if self.gpu:
            self.tf.config.experimental.reset_memory_stats("GPU:0")

    def _cap_memory(self, tf: Any, gpu: Any, limit_mib: float, hint_mib: float | None) -> dict[str, Any]:
        """Emulate a card of ``limit_mib``: TF's allocator may hold the card less the CUDA context (issue 31)."""
        context = gpumem.hinted_context(hint_mib)
        self.cap_mib = max(1.0, float(int(gpumem.emulated_cap_mib(limit_mib, context))))  # whole MiB, at least 1
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(self.cap_mib))]
        )
        return {"memory_limit_mib": limit_mib, "memory_cap_mib": self.cap_mib, "cuda_context_setup_mib": context.mib,
                "cuda_context_source": context.source}

    def memory_stats(self) -> MemoryStats:
        if not self.gpu:
            return MemoryStats(
                peak_mib=None,
                # Measured (TF 2.21, oneDNN on, tiny_cnn 3x64x64): get_memory_info("CPU:0") answers, but
                # for oneDNN's pool only and not monotone in the batch: peak 160 MiB at batch 186 and
                # 131 MiB at 187, while the process's private memory (VmData) peaked at 634-767 MiB.
                # Reported as a peak it would mislead more than it tells.
                source="none: TensorFlow's CPU allocator statistics cover oneDNN's pool only and are not "
                "monotone in the batch size (tf.config.experimental.get_memory_info('CPU:0'))",
            )
        self.tf.test.experimental.sync_devices()
        info = self.tf.config.experimental.get_memory_info("GPU:0")
        return MemoryStats(
            peak_mib=info["peak"] / MIB, source="tf.config.experimental.get_memory_info['peak']",
            # beyond the allocator: under a cap its BFC pool is the whole cap (allocated at first use, growth being
            # off on a logical device); without one the pool is unknown, so no context is claimed
            context_mib=gpumem.context_mib(self.cap_mib).mib if self.cap_mib else None,
        )

    def is_oom(self, exc: BaseException) -> bool:
        import tensorflow as tf  # already loaded in a worker that got this far; cheap then

        if isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
        # A graph-execution failure can arrive as another OpError (or a wrapper) whose text or cause says OOM.
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if isinstance(current, tf.errors.ResourceExhaustedError) or _is_oom_message(str(current)):
                return True
            current = current.__cause__ or current.__context__
        return is_generic_oom(exc)

    @classmethod
    def oom_examples(cls) -> tuple[list[BaseException], list[BaseException]]:
        # Copied from real failures (the BFC allocator's text; a graph-execution error that wraps it).
        import tensorflow as tf

        text = (
            "OOM when allocating tensor with shape[30000,28,28,32] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
        )
        wrapped = RuntimeError("train step failed")
        wrapped.__cause__ = tf.errors.ResourceExhaustedError(None, None, text)
        return (
            [
                tf.errors.ResourceExhaustedError(None, None, text),
                tf.errors.ResourceExhaustedError(
                    None,
                    None,
                    "Graph execution error:\n\nDetected at node gradient_tape/conv2d/Conv2DBackpropInput\n" + text,
                ),
                wrapped,
            ],
            [ValueError("shapes (3,) and (4,) not aligned"),
             tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [8,5] vs. [8,3]")],
        )

    def close(self) -> None:
        self._step_fn = self._predict_fn = None
        self.model = self.optimizer = None
