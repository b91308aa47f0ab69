"""TensorFlow adapter: Keras 3 layers, NHWC inside, one ``tf.function`` train step traced once.

The model description and its weights are NCHW / C-major (see :mod:`harness.models`); TensorFlow's
CPU and GPU kernels prefer NHWC, so this adapter converts at its edges: batches are transposed in
:meth:`TensorFlowAdapter.prepare_batch`, conv kernels go from (out, in, k, k) to (k, k, in, out), and
the rows of a Dense kernel that reads a Flatten are permuted from the canonical (C, H, W) order to the
(H, W, C) order Keras' Flatten produces. :meth:`TensorFlowAdapter.get_weights` undoes all of it, so
weights compare one for one with the NCHW frameworks. ``tensorflow`` is imported inside methods only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from adapters.base import Adapter, MemoryStats, OptimizerSpec, RuntimeConfig, is_generic_oom
from harness.errors import ConfigError
from harness.models import (
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    Layer,
    MaxPool2D,
    ModelDescription,
    ReLU,
    Residual,
    layer_output_shape,
)

MIB = 1024.0 * 1024.0
MEMORY_MODES = ("growth", "preallocate")


# Weight converters: canonical layout -> Keras layout, and back. One pair per kind of array.
Converter = Callable[[np.ndarray], np.ndarray]
ConverterPair = tuple[Converter, Converter]


def _identity(a: np.ndarray) -> np.ndarray:
    return a


def _conv_to_keras(a: np.ndarray) -> np.ndarray:
    return a.transpose(2, 3, 1, 0)  # (out, in, kh, kw) -> (kh, kw, in, out)


def _conv_from_keras(a: np.ndarray) -> np.ndarray:
    return a.transpose(3, 2, 0, 1)


IDENTITY: ConverterPair = (_identity, _identity)


def _flatten_dense_converters(chw: tuple[int, ...]) -> ConverterPair:
    """Row permutation of a Dense kernel reading a Flatten: canonical rows are (c, h, w), Keras' (h, w, c)."""
    c, h, w = chw

    def to_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)

    def from_keras(a: np.ndarray) -> np.ndarray:
        return a.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)

    return to_keras, from_keras


def _max_padding(keras: Any, pad: int) -> Any:
    """Symmetric padding that never wins a max (PyTorch and MXNet pad max-pooling with -inf; Keras cannot)."""
    lowest = float(np.finfo(np.float32).min)  # finite: no inf may reach an arithmetic op in the backward pass
    return keras.layers.Lambda(
        lambda t: keras.ops.pad(t, [[0, 0], [pad, pad], [pad, pad], [0, 0]], constant_values=lowest))


def _is_oom_message(text: str) -> bool:
    # What TF's allocators write: "OOM when allocating tensor with shape[...]" (BFC, CPU and GPU) and
    # "Resource exhausted" / "ResourceExhaustedError" in the text of a wrapped graph-execution error.
    return any(
        p in text for p in ("OOM when allocating", "ResourceExhausted", "Resource exhausted", "out of memory")
    )


class TensorFlowAdapter(Adapter):
    """TensorFlow 2 with Keras 3 layers, NHWC, a traced ``tf.function`` step."""

    name = "tensorflow"
    distributions = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu")
    import_name = "tensorflow"
    options = {"memory_mode": MEMORY_MODES}
    oom_stderr_patterns = (
        "OOM when allocating tensor",
        "ResourceExhaustedError",
        "failed to allocate memory",
    )

    def __init__(self) -> None:
        self.tf: Any = None
        self.gpu = False
        self.device_name = "/CPU:0"
        self.model: Any = None
        self.optimizer: Any = None
        self._step_fn: Any = None
        self._predict_fn: Any = None
        self._variables: list[Any] = []  # trainable variables, in canonical weight order
        self._from_keras: list[Converter] = []

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

    def setup(self, runtime: RuntimeConfig) -> dict[str, Any]:
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # Keras 3 would otherwise obey the user's choice
        import tensorflow as tf

        self.tf = tf
        if runtime.precision != "fp32":
            raise ConfigError(
                f"the tensorflow adapter runs fp32 only; precision = {runtime.precision!r} "
                "is not supported yet (use precision = 'fp32')"
            )
        mode = runtime.options.get("memory_mode", MEMORY_MODES[0])
        if mode not in MEMORY_MODES:
            raise ConfigError(f"tensorflow: memory_mode = {mode!r} is not one of {', '.join(MEMORY_MODES)}")
        # Everything below configures the runtime, so it must run before the first op initialises it.
        if runtime.threads:
            tf.config.threading.set_intra_op_parallelism_threads(runtime.threads)
            tf.config.threading.set_inter_op_parallelism_threads(runtime.threads)
        gpus = tf.config.list_physical_devices("GPU")
        want_gpu = runtime.device == "gpu" or (runtime.device == "auto" and bool(gpus))
        if want_gpu and not gpus:
            raise ConfigError(
                "device = 'gpu' was asked for, but TensorFlow sees no GPU "
                "(tf.config.list_physical_devices('GPU') is empty: a CPU-only build such as "
                "tensorflow-cpu, or no CUDA driver); use device = 'cpu' or 'auto'"
            )
        info: dict[str, Any] = {}
        if want_gpu:
            gpu = gpus[0]
            tf.config.set_visible_devices([gpu], "GPU")  # one GPU per trial, like the other adapters
            if runtime.memory_limit_mib:
                # A logical device with a hard cap emulates a smaller card; TF refuses memory growth on
                # a device with a logical configuration, so the cap replaces the memory mode.
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(runtime.memory_limit_mib))]
                )
                info["memory_limit_mib"] = float(runtime.memory_limit_mib)
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
        info.update(
            # TensorFlow's CPU kernels run under port::ScopedFlushDenormal (tensorflow/core/platform/denormal.h):
            # it flushes whatever is asked, and has no Python API to stop it, so "framework-default" flushes too
            cpu_denormals="flush",
            device=self.device_name,
            memory_mode=mode,
            intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        )
        return info

    def _apply(self, keras: Any, layers: Sequence[Layer], x: Any, in_shape: tuple[int, ...],
               pending: list[tuple[Any, tuple[str, ...], list[ConverterPair]]]) -> Any:
        """Apply ``layers`` to the Keras tensor ``x`` (recursing into residual blocks); record weights to load."""
        prev: Layer | None = None
        prev_in: tuple[int, ...] = in_shape
        for layer in layers:
            if isinstance(layer, Conv2D):
                padding = layer.padding
                if layer.stride > 1 and padding == "same":
                    # Keras' "same" pads asymmetrically (more at the bottom/right) at stride 2; the description
                    # pads kernel // 2 on every side, like PyTorch and MXNet: pad explicitly, then convolve.
                    x = keras.layers.ZeroPadding2D(layer.kernel // 2, data_format="channels_last")(x)
                    padding = "valid"
                k = keras.layers.Conv2D(layer.filters, layer.kernel, strides=layer.stride, padding=padding,
                                        use_bias=layer.use_bias, data_format="channels_last")
                names: tuple[str, ...] = ("kernel", "bias") if layer.use_bias else ("kernel",)
                convs: list[ConverterPair] = [(_conv_to_keras, _conv_from_keras)]
                pending.append((k, names, convs + [IDENTITY] * layer.use_bias))
            elif isinstance(layer, BatchNorm):
                k = keras.layers.BatchNormalization(axis=-1, momentum=layer.momentum, epsilon=layer.eps)
                pending.append((k, ("gamma", "beta"), [IDENTITY, IDENTITY]))
            elif isinstance(layer, ReLU):
                k = keras.layers.ReLU()
            elif isinstance(layer, MaxPool2D):
                if layer.padding:
                    x = _max_padding(keras, layer.padding)(x)
                k = keras.layers.MaxPooling2D(layer.size, strides=layer.stride or layer.size,
                                              data_format="channels_last")
            elif isinstance(layer, GlobalAvgPool):
                k = keras.layers.GlobalAveragePooling2D(data_format="channels_last")
            elif isinstance(layer, Flatten):
                k = keras.layers.Flatten()
            elif isinstance(layer, Dense):
                k = keras.layers.Dense(layer.units)
                kernel_conv = IDENTITY
                if isinstance(prev, Flatten) and len(prev_in) == 3:
                    kernel_conv = _flatten_dense_converters(prev_in)  # reads a (C, H, W) flatten
                pending.append((k, ("kernel", "bias"), [kernel_conv, IDENTITY]))
            elif isinstance(layer, Residual):
                body = self._apply(keras, layer.body, x, in_shape, pending)
                shortcut = self._apply(keras, layer.shortcut, x, in_shape, pending) if layer.shortcut else x
                k = None
                x = keras.layers.Add()([body, shortcut])
            else:
                raise ConfigError(f"the tensorflow adapter cannot build layer {layer!r} (input {in_shape})")
            if k is not None:
                x = k(x)
            prev, prev_in = layer, in_shape
            in_shape = layer_output_shape(layer, in_shape)
        return x

    def build(self, model: ModelDescription, weights: Sequence[np.ndarray], optimizer: OptimizerSpec) -> None:
        tf = self.tf
        import keras

        inputs = keras.Input(shape=(model.input_shape[1], model.input_shape[2], model.input_shape[0]))
        # (Keras layer, names of its trainable weights in canonical order, one converter pair per weight)
        pending: list[tuple[Any, tuple[str, ...], list[ConverterPair]]] = []
        with tf.device(self.device_name):  # the layers' variables are made as they are applied
            outputs = self._apply(keras, model.layers, inputs, model.input_shape, pending)
            # the functional API, not Sequential: a residual block has two paths that meet in an Add
            self.model = keras.Model(inputs, outputs, name=model.name)
        it = iter(weights)
        assignments: list[tuple[Any, Converter]] = []  # (variable, converter back to canonical)
        for klayer, names, converters in pending:
            for attr, (to_keras, from_keras) in zip(names, converters, strict=True):
                var = getattr(klayer, attr)
                value = to_keras(np.asarray(next(it), dtype=np.float32))
                if tuple(var.shape) != value.shape:
                    raise ValueError(
                        f"weight shape {value.shape} does not fit {tuple(var.shape)} ({klayer.name})"
                    )
                var.assign(value)
                assignments.append((var, from_keras))
        self._variables = [a[0] for a in assignments]
        self._from_keras = [a[1] for a in assignments]

        if optimizer.name == "sgd":
            # Keras' momentum (v = m*v - lr*g; w += v) equals PyTorch's (b = m*b + g; w -= lr*b)
            # for a constant learning rate.
            self.optimizer = keras.optimizers.SGD(learning_rate=optimizer.lr, momentum=optimizer.momentum)
        else:
            self.optimizer = keras.optimizers.Adam(
                learning_rate=optimizer.lr,
                beta_1=optimizer.adam_betas[0],
                beta_2=optimizer.adam_betas[1],
                epsilon=optimizer.adam_eps,
            )
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
                logits = net(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables, strict=True))
            return loss

        @tf.function(input_signature=signature[:1])
        def infer(x: Any) -> Any:
            return net(x, training=False)

        self._step_fn, self._predict_fn = step, infer

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

    def predict(self, batch: Any) -> np.ndarray:
        x, _ = batch
        with self.tf.device(self.device_name):
            return np.asarray(self._predict_fn(x).numpy(), dtype=np.float32)

    def reset_memory_stats(self) -> None:
        if self.gpu:
            self.tf.config.experimental.reset_memory_stats("GPU:0")

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
            peak_mib=info["peak"] / MIB, source="tf.config.experimental.get_memory_info['peak']"
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

    def close(self) -> None:
        self._step_fn = self._predict_fn = None
        self.model = self.optimizer = None
