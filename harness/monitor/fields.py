"""The sampler's vocabulary: every field it measures, once (name with unit, source, statistic).

Pure data: the probes, the windows, the store's columns and the report's metrics are derived from here,
and anything may import it (the report too) without loading a probe, NVML or a thread.
"""

from __future__ import annotations

NO_GPU_NOTICE = "no GPU: running on CPU — GPU columns will be empty"
