"""JAX's adapter and everything it needs, one module per role as in every framework's package: ``adapter``
(the :class:`~adapters.base.Adapter`), ``parts`` (framework-free pieces of the model), ``mathmode`` (its GPU math
switches), ``build`` (which device the installed build can use, from metadata) and the lock files its managed
environment is built from (``locks/``, docs/environments.md). Importing it imports no framework."""

from adapters._moved import forwarding_getattr
from adapters.jax.adapter import JAXAdapter

__all__ = ["JAXAdapter"]
#: the names the flat module adapters/jax.py had (before 0.2), found in .adapter with a DeprecationWarning
__getattr__ = forwarding_getattr(__name__, "adapters.jax.adapter")
