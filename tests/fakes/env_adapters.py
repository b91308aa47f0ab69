"""Fake adapters that declare requirements (the plugin capability of issue 38): one whose environment builds in
seconds (numpy only, the version the parent has), one whose requirements cannot be installed, and a plugin of the
PyTorch adapter that asks for its framework alone."""

from __future__ import annotations

import numpy as np

from adapters.pytorch import PyTorchAdapter
from tests.fakes.adapter import FakeAdapter


class NumpyEnvAdapter(FakeAdapter):
    """The fake adapter, run in a managed environment of its own holding numpy alone."""

    name = "npenv"
    requirements = (f"numpy=={np.__version__}",)


class BrokenEnvAdapter(FakeAdapter):
    """The fake adapter whose environment cannot be built: no such distribution exists."""

    name = "brokenenv"
    requirements = ("batchscope-no-such-distribution==0.0.1",)


class TorchOnlyPlugin(PyTorchAdapter):
    """A plugin of the PyTorch adapter whose requirements are its framework alone (and numpy): its managed
    environment holds those and what pip resolves for them, nothing of batchscope's (issue 50, item 1)."""

    name = "torchonly"
    requirements = ("torch==2.13.0", f"numpy=={np.__version__}")
