"""MXNet's adapter and everything it needs, one module per role as in every framework's package: ``adapter``
(the :class:`~adapters.base.Adapter`), ``parts`` (framework-free pieces of the model), ``mathmode`` (its GPU math
switches), ``build`` (which device the installed build can use, from metadata) and the lock files its managed
environment is built from (``locks/``, docs/environments.md). Importing it imports no framework."""

from adapters.mxnet.adapter import MXNetAdapter

__all__ = ["MXNetAdapter"]
