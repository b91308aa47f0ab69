"""A user's model package outside the repository (``model = "package.module:function"``), and a good model."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

from tests import ROOT

_names = itertools.count()

#: a good user model: a small residual net described with harness.models only
GOOD = """
from harness.models import (BatchNorm, Conv2D, Dense, GlobalAvgPool, ModelDescription, ReLU, Residual)

def small_resnet(input_shape, classes):
    block = Residual(body=(Conv2D(8, 3, use_bias=False), BatchNorm(), ReLU(), Conv2D(8, 3, use_bias=False),
                           BatchNorm()))
    return ModelDescription("small_resnet", input_shape, classes,
                            (Conv2D(8, 3, use_bias=False, stride=2), BatchNorm(), ReLU(), block, ReLU(),
                             GlobalAvgPool(), Dense(classes)))
"""


def user_package(root: Path, body: str) -> str:
    """A package ``usermodelsN`` under ``root`` (outside the repository) whose ``nets`` module holds ``body``."""
    assert not root.resolve().is_relative_to(ROOT)
    name = f"usermodels{next(_names)}"  # a fresh name per test: sys.modules keeps what was imported
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent(body))
    return f"{name}.nets"
