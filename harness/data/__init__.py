"""Data sets: what a trial trains on, prepared once into ``.npy`` files that every worker memory-maps.

:mod:`harness.data.known` names the data sets, :mod:`harness.data.prepared` holds the records (a request, a
prepared set on disk), :mod:`harness.data.catalogue` the loaders (one module per downloadable or embedded
source). This package's namespace stays light: the loaders (``tarfile``, ``urllib``) load on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.known import DATASETS
from harness.data.prepared import ARRAYS, DataRequest, DatasetInfo, PreparedData, default_cache_dir, load_prepared


def prepare(req: DataRequest, cache_dir: Path | None = None) -> PreparedData:
    """Prepare (or reuse) the data set ``req``: :func:`harness.data.catalogue.prepare`."""
    from harness.data.catalogue import prepare as _prepare

    return _prepare(req, cache_dir)


def __getattr__(name: str) -> Any:
    if name == "LOADERS":
        from harness.data.catalogue import LOADERS

        return LOADERS
    raise AttributeError(f"module 'harness.data' has no attribute {name!r}")


__all__ = ["ARRAYS", "DATASETS", "DataRequest", "DatasetInfo", "PreparedData", "default_cache_dir",
           "load_prepared", "prepare"]
