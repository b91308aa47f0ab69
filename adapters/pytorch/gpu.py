"""PyTorch's CUDA caching allocator settings under ``[adapters.pytorch]``: validated in the parent and set in the
worker's environment before torch is imported (torch is never imported here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the CUDA caching allocator's settings accepted under [adapters.pytorch], in the order they are written
ALLOCATOR_SETTINGS = ("expandable_segments", "max_split_size_mb", "garbage_collection_threshold")
#: where torch reads them: PYTORCH_ALLOC_CONF since 2.9 (it wins when both are set), PYTORCH_CUDA_ALLOC_CONF before.
#: Both get the same value, so whichever this torch reads, and whatever the user's shell had, the setting holds.
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
#: PyTorch refuses smaller values (20 MiB is its large-block size; versions before 2.9 refuse 20 itself)
MIN_SPLIT_MB = 21


def alloc_conf(options: Mapping[str, Any]) -> str:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` value for validated allocator settings ("" when none is set)."""
    parts = []
    if "expandable_segments" in options:
        parts.append(f"expandable_segments:{'True' if options['expandable_segments'] else 'False'}")
    if "max_split_size_mb" in options:
        parts.append(f"max_split_size_mb:{int(options['max_split_size_mb'])}")
    if "garbage_collection_threshold" in options:
        parts.append(f"garbage_collection_threshold:{float(options['garbage_collection_threshold']):g}")
    return ",".join(parts)
