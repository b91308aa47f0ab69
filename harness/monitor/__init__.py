"""Watching a worker: the sampler thread, its device and host probes (NVML, /proc), and windows per phase."""
