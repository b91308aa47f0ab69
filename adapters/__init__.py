"""Framework adapters: a framework-neutral core (``base``, ``records``, ``building``, ``builds``, ``mathmode``,
``gpumem``, ``fpenv``, ``compiled``) and one package per framework (``pytorch``, ``tensorflow``, ``jax``, ``mxnet``)
with the same module names in each where the role is the same. Each imports its framework lazily, inside the
adapter's methods, so that importing a module (to list adapters) costs nothing and imports no framework.

The modules that moved into a framework's package in 0.2 are still found under their old names here, with a
DeprecationWarning (``from adapters import torch_parts``); CHANGELOG, "For plugin authors".
"""

from adapters._moved import deprecated_getattr

__getattr__ = deprecated_getattr(__name__, {
    # torch_parts and jax_parts were split (parts, gpu/threads): the adapter module has every name they had
    "torch_parts": ("adapters.pytorch.adapter", ""), "keras_parts": ("adapters.tensorflow.parts", ""),
    "jax_parts": ("adapters.jax.adapter", ""), "jax_optim": ("adapters.jax.optim", ""),
    "jax_gpu": ("adapters.jax.gpu", ""),
})
