"""Framework adapters: a framework-neutral core (``base``, ``records``, ``building``, ``builds``, ``mathmode``,
``gpumem``, ``fpenv``, ``compiled``) and one package per framework (``pytorch``, ``tensorflow``, ``jax``, ``mxnet``)
with the same module name in each for the same role (docs/adapters.md, "Package layout"). Each imports its framework
lazily, inside the adapter's methods, so that importing a module (to list adapters) costs nothing and imports no
framework. Plugins import ``adapters.base`` only: the rest is internal and moves without notice (CONTRIBUTING.md,
"Compatibility").
"""
