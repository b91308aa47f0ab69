"""Which device the installed JAX build can use, from its distributions' metadata; no framework is imported
(:mod:`adapters.builds` says how the parent uses it)."""

from __future__ import annotations

from adapters.builds import GpuBuild, dist_version


def gpu_build() -> GpuBuild | None:
    """jax: a CUDA plugin (``jax-cuda12-plugin`` / ``jax-cuda13-plugin``) or an old ``jaxlib+cuda`` wheel."""
    version = dist_version("jax")
    if version is None:
        return None
    for major in ("13", "12"):
        plugin = dist_version(f"jax-cuda{major}-plugin")
        if plugin:
            return GpuBuild(True, f"CUDA {major} (jax {version}, jax-cuda{major}-plugin {plugin})")
    jaxlib = dist_version("jaxlib") or ""
    if "+cuda" in jaxlib:
        return GpuBuild(True, f"CUDA (jaxlib {jaxlib})")
    return GpuBuild(False, f"CPU only (jax {version}; no jax-cuda12-plugin or jax-cuda13-plugin is installed)")
