"""Fake adapters that declare requirements (the plugin capability of issue 38): one whose environment builds in
seconds (numpy only, the version the parent has), one whose requirements cannot be installed."""

from __future__ import annotations

import numpy as np

from tests.fakes.adapter import FakeAdapter


class NumpyEnvAdapter(FakeAdapter):
    """The fake adapter, run in a managed environment of its own holding numpy alone."""

    name = "npenv"
    requirements = (f"numpy=={np.__version__}",)


class BrokenEnvAdapter(FakeAdapter):
    """The fake adapter whose environment cannot be built: no such distribution exists."""

    name = "brokenenv"
    requirements = ("batchscope-no-such-distribution==0.0.1",)
