"""The public API keeps working (CONTRIBUTING.md, "Compatibility"): every name release 0.1.0's public modules defined,
or took from batchscope's own modules and a plugin could import from them, still imports from the same path, with
no warning. A name that moves must leave a deprecating shim for one minor release; this test fails until it has one.

The lists are 0.1.0's (commit 927c159: ``adapters/base.py``, ``harness/models.py``, ``harness/errors.py``, read by
``ast``); ``tests/contract/test_legacy_plugin.py`` runs that release's PyTorch adapter as a plugin. ``ConfigError``,
which 0.1.0's ``harness/models.py`` only imported for its own use, is ``harness.errors``' name, checked there.
"""

from __future__ import annotations

import importlib
import warnings

import pytest

RELEASE_0_1_0 = {
    "adapters.base": ("Adapter", "ConfigError", "EvalResult", "MemoryStats", "ModelDescription", "OptimizerSpec",
                      "RuntimeConfig", "is_generic_oom", "softmax_cross_entropy"),
    "harness.models": ("BatchNorm", "CATALOGUE", "Conv2D", "Dense", "Flatten", "GlobalAvgPool", "Init", "Layer",
                       "MaxPool2D", "ModelDescription", "ReLU", "build_description", "deep_cnn", "init_weights",
                       "osu_cnn", "tiny_cnn"),
    "harness.errors": ("AdapterError", "BatchscopeError", "ConfigError", "DataError", "DoesNotFitError",
                       "PartialReadingError", "ProbeError", "ProbeUnsupportedError", "SearchAborted", "StoreError",
                       "WorkerGoneError", "WorkerProtocolError"),
}


@pytest.mark.parametrize("module", sorted(RELEASE_0_1_0))
def test_every_name_of_the_previous_release_imports_from_its_path_without_a_warning(module: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DeprecationWarning here means a public name moved: say so in CHANGELOG
        found = importlib.import_module(module)
        missing = [name for name in RELEASE_0_1_0[module] if not hasattr(found, name)]
    assert not missing, f"{module} lost {missing}: a public name that moves keeps a deprecating shim for one minor " \
                        "release (CONTRIBUTING.md, 'Compatibility')"


def test_the_shared_names_are_one_object_wherever_a_plugin_imports_them() -> None:
    import adapters.base
    import harness.errors
    import harness.models

    assert adapters.base.ConfigError is harness.errors.ConfigError
    assert adapters.base.ModelDescription is harness.models.ModelDescription
