"""Loaders of the real data sets (the registry lives in :mod:`harness.data`).

Each loader takes the :class:`~harness.data.DataRequest` and the cache directory and returns raw
NCHW arrays (``x_train``, ``y_train``, ``x_test``, ``y_test``) plus the number of classes;
:func:`harness.data.prepare` normalises, hashes and writes them. Loaders import nothing heavier
than NumPy at module level, and never a training framework.
"""
