"""Issue 50, item 9: the cache follows the platform's convention (XDG_CACHE_HOME on Linux), BATCHSCOPE_CACHE first."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.data.prepared import default_cache_dir
from harness.envs.spec import envs_root

HOME = "/home/ada"


@pytest.mark.parametrize(("environ", "platform", "expected"), [
    ({"HOME": HOME}, "linux", f"{HOME}/.cache/batchscope"),
    ({"HOME": HOME, "XDG_CACHE_HOME": "/scratch/cache"}, "linux", "/scratch/cache/batchscope"),
    ({"HOME": HOME, "XDG_CACHE_HOME": "relative/cache"}, "linux", f"{HOME}/.cache/batchscope"),  # the spec: ignored
    ({"HOME": HOME, "XDG_CACHE_HOME": ""}, "freebsd14", f"{HOME}/.cache/batchscope"),
    ({"HOME": HOME, "XDG_CACHE_HOME": "/scratch/cache"}, "darwin", f"{HOME}/Library/Caches/batchscope"),
    ({"HOME": HOME, "LOCALAPPDATA": "/c/Users/ada/AppData/Local"}, "win32",
     "/c/Users/ada/AppData/Local/batchscope/Cache"),
    ({"HOME": HOME, "XDG_CACHE_HOME": "/scratch/cache", "BATCHSCOPE_CACHE": "/data/bs"}, "linux", "/data/bs"),
    ({"HOME": HOME, "BATCHSCOPE_CACHE": "/data/bs"}, "darwin", "/data/bs"),
    ({"HOME": HOME, "BATCHSCOPE_CACHE": ""}, "linux", f"{HOME}/.cache/batchscope"),  # set but empty: not a folder
], ids=["linux", "xdg", "xdg-relative", "xdg-empty", "macos", "windows", "batchscope-cache-first",
        "batchscope-cache-macos", "batchscope-cache-empty"])
def test_the_cache_follows_the_platform_convention(environ: dict[str, str], platform: str, expected: str) -> None:
    assert default_cache_dir(environ, platform) == Path(expected)


def test_the_environments_follow_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Managed environments live in the cache's ``envs/`` (``$BATCHSCOPE_ENVS`` first), wherever the cache is."""
    monkeypatch.delenv("BATCHSCOPE_CACHE", raising=False)
    monkeypatch.delenv("BATCHSCOPE_ENVS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "batchscope"
    assert envs_root() == tmp_path / "xdg" / "batchscope" / "envs"
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "mine"))
    assert envs_root() == tmp_path / "mine" / "envs"
    monkeypatch.setenv("BATCHSCOPE_ENVS", str(tmp_path / "envs"))
    assert envs_root() == tmp_path / "envs"
