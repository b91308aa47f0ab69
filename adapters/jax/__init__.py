"""JAX's adapter and everything it needs, one module per role, named as in every framework's package (docs/adapters.md,
"Package layout"): ``adapter`` (the :class:`~adapters.base.Adapter`: setup, steps, memory, out-of-memory),
``layers`` (the build template's hooks as pure layer functions), ``convert`` (host batches aligned for XLA),
``optim`` (SGD and Adam written out), ``gpu`` (memory fractions, CUDA plugins), ``threads`` (XLA's CPU pools),
``mathmode`` (its GPU math switches), ``build`` (which device the installed build can use, from metadata) and the
lock files its managed environment is built from (``locks/``, docs/environments.md). Importing it imports no
framework."""

from adapters.jax.adapter import JAXAdapter

__all__ = ["JAXAdapter"]
