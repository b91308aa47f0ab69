"""batchscope's tests, laid out like the packages they test; shared fakes live in :mod:`tests.fakes`."""

from pathlib import Path

#: the repository root (where pyproject.toml is)
ROOT = Path(__file__).resolve().parent.parent
