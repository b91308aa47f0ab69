"""Which lock kind a command's managed environments are built from, and the download it is not allowed to start.

``BATCHSCOPE_ENV_KIND=cuda`` (what ``make quick GPU=1`` sets) on a machine where NVML sees no GPU would fetch
gigabytes of CUDA wheels before anything said there is no GPU to use them on. :func:`managed_kind` refuses that
before any download (ConfigError: exit 2), naming the environments, what they would fetch (:mod:`.sizes`) and how to
build them deliberately (``batchscope env build --kind cuda``). An environment already built fetches nothing and is
not refused; neither is a plugin's (its requirements are the same for either kind).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.envs.build import is_built
from harness.envs.resolve import managed_spec
from harness.envs.sizes import DownloadSize, download_size
from harness.envs.spec import KIND_VAR, chosen_kind, envs_root
from harness.errors import ConfigError


def deliberate(frameworks: Iterable[str]) -> str:
    """How to build ``frameworks``' CUDA environments on purpose where NVML sees no GPU (to install them once, or to
    prepare a machine image before its GPU is attached); the frameworks before the option, as argparse reads them."""
    return f"batchscope env build {' '.join(frameworks)} --kind cuda"


def cuda_downloads(frameworks: Iterable[str], root: Path | None = None,
                   adapters: Mapping[str, type] | None = None) -> dict[str, DownloadSize]:
    """What building each of ``frameworks``' CUDA environments would download, for those not built yet from a CUDA
    lock (MXNet has none: it uses its CPU lock). ``adapters``: their classes where the command looked them up
    already (else read from the registry)."""
    out: dict[str, DownloadSize] = {}
    for framework in dict.fromkeys(frameworks):
        spec = managed_spec(framework, "cuda", (adapters or {}).get(framework))
        if spec is None or spec.kind != "cuda" or not spec.complete:
            continue
        if not is_built(spec.path(root or envs_root())):
            out[framework] = download_size(spec.requirements, Path(spec.source))
    return out


def managed_kind(frameworks: Iterable[str], gpu_present: bool, root: Path | None = None,
                 adapters: Mapping[str, type] | None = None) -> str:
    """The lock kind for ``frameworks``' managed environments (:func:`harness.envs.spec.chosen_kind`); ``adapters``:
    their classes where the command looked them up already.

    Raises:
        ConfigError: ``cuda`` asked for (``BATCHSCOPE_ENV_KIND``) where NVML sees no GPU and some of those
            environments are not built: nothing has been downloaded; the message says what would have been.
    """
    kind = chosen_kind(gpu_present)
    if kind != "cuda" or gpu_present:
        return kind
    downloads = cuda_downloads(frameworks, root, adapters)
    if downloads:
        total = DownloadSize(sum(d.known_bytes for d in downloads.values()),
                             sum(d.pins for d in downloads.values()),
                             tuple(u for d in downloads.values() for u in d.unknown))
        each = "; ".join(f"{fw} {d.text()}" for fw, d in downloads.items())
        raise ConfigError(
            f"{KIND_VAR}=cuda asks for CUDA environments, but NVML sees no GPU on this machine: building "
            f"{', '.join(downloads)} would download {total.text()}: {each} (the locks' size tables, "
            f"adapters/<framework>/locks/cuda.sizes.json). Nothing was downloaded. Unset {KIND_VAR} (or set "
            f"it to cpu) to run on the CPU locks, or build them deliberately: {deliberate(downloads)}")
    return kind
