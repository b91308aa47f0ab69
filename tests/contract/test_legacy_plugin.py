"""A plugin written against the previous plugin API passes what it supports and is told exactly what it lacks.

The plugin is release 0.1.0's PyTorch adapter under another name (``tests/contract/legacy/pytorch_v1.py``):
no build template, no ``layer_residual``, ``batchnorm_state()``, ``oom_examples()`` or gradient accumulation.
The whole contract suite runs against it, as its author would run it, in a pytest of its own; the JUnit report
says how each case ended. Before the suite tested each model and capability on its own, this plugin failed 20
of its cases, osu_cnn's among them, because resnet20's failure replaced the one record every model shared.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import ROOT
from tests.contract.conftest import PROBE_DIRS, REFERENCE_ADAPTER, SHARED_PROBES_ENV

pytestmark = pytest.mark.slow  # the reference probe is shared (SHARED_UNITS in tests/scheduling.py)

LEGACY = "tests.contract.legacy.pytorch_v1:PyTorchV1Adapter"
#: what the plugin lacks, by the cases that need it (test name, or test name and model)
RESNET_TESTS = ("test_param_count_matches_description", "test_output_shape",
                "test_get_weights_round_trips_init_weights_exactly",
                "test_same_first_batch_and_updates_as_the_reference",
                "test_residual_networks_have_the_published_parameter_counts")
EXPECTED_UNSUPPORTED = {
    **{(test, model): "layer_residual" for model in ("resnet18", "resnet20") for test in RESNET_TESTS},
    ("test_batchnorm_running_statistics_match_the_reference", ""): "batchnorm_state",
    ("test_is_oom_recognises_the_frameworks_real_errors", ""): "oom_examples",
    ("test_accumulating_two_half_batches_equals_one_step", ""): "accumulation",
    ("test_flat_gradient_is_the_references_and_changes_nothing", ""): "flat_gradient",
    ("test_queued_steps_train_what_waited_steps_train_and_the_wait_waits", ""): "queued_steps",
    ("test_a_batch_size_change_trains_the_references_steps", ""): "lr_change",  # issue 52
}


def _case(name: str) -> tuple[str, str]:
    """(test, model) from a JUnit test name such as ``test_output_shape[...PyTorchV1Adapter-resnet20]``."""
    test, _, params = name.partition("[")
    model = params.rstrip("]").removeprefix(LEGACY).lstrip("-")
    return test, model


@pytest.fixture(scope="module")
def legacy_run(tmp_path_factory: pytest.TempPathFactory, probe) -> tuple[dict[tuple[str, str], tuple[str, str]], str]:
    """Each case's (outcome, message) and the terminal output of the contract suite run against the plugin.

    The suite compares the plugin with the reference adapter's probe: it is handed this session's (the same
    adapter on the same machine) rather than probing it again."""
    probe(REFERENCE_ADAPTER)
    junit = tmp_path_factory.mktemp("legacy") / "junit.xml"
    env = dict(os.environ)
    env[SHARED_PROBES_ENV] = f"{REFERENCE_ADAPTER}={PROBE_DIRS[REFERENCE_ADAPTER]}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/contract/test_contract.py", "--adapter", LEGACY, "-p",
         "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit2", "-q"],
        capture_output=True, text=True, cwd=ROOT, timeout=1800, env=env,
    )
    assert junit.exists(), proc.stdout[-4000:] + proc.stderr[-2000:]
    cases: dict[tuple[str, str], tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome, message = tag, child.get("message", "") + "\n" + (child.text or "")
        cases[_case(case.get("name", ""))] = (outcome, message)
    return cases, proc.stdout


def test_the_legacy_plugin_fails_nothing(legacy_run):
    cases, out = legacy_run
    bad = {case: message[:600] for case, (outcome, message) in cases.items() if outcome in ("failure", "error")}
    assert not bad, f"{bad}\n{out[-3000:]}"


def test_every_case_for_the_models_it_builds_passes(legacy_run):
    cases, _ = legacy_run
    for model in ("osu_cnn", "tiny_cnn", "deep_cnn"):
        mine = {case: outcome for case, (outcome, _) in cases.items() if case[1] == model}
        assert len(mine) == 4 and set(mine.values()) == {"passed"}, (model, mine)


def test_it_is_told_exactly_what_it_lacks_for_the_rest(legacy_run):
    cases, _ = legacy_run
    unsupported = {case: message for case, (outcome, message) in cases.items() if outcome == "skipped"}
    assert set(unsupported) == set(EXPECTED_UNSUPPORTED), sorted(set(unsupported) ^ set(EXPECTED_UNSUPPORTED))
    for case, message in unsupported.items():
        needs = EXPECTED_UNSUPPORTED[case]
        assert message.startswith(f"not supported: needs `{needs}` (pytorch_v1 has no {needs}; to add it:"), message
    passed = [case for case, (outcome, _) in cases.items() if outcome == "passed"]
    assert len(passed) == len(cases) - len(EXPECTED_UNSUPPORTED)


def test_the_terminal_counts_them_as_unsupported_not_passed_or_skipped(legacy_run):
    _, out = legacy_run
    summary = out.strip().splitlines()[-1]
    assert re.search(rf"\b{len(EXPECTED_UNSUPPORTED)} unsupported\b", summary), summary
    assert "skipped" not in summary and "failed" not in summary, summary
    assert "not supported: what the adapters lack" in out
    assert "test_batchnorm_running_statistics_match_the_reference" in out.split("what the adapters lack")[1]


def test_legacy_fixture_is_the_0_1_0_adapter():
    """The fixture stays the released code: the class body below its docstring is 927c159's, renamed."""
    released = subprocess.run(["git", "show", "927c159:adapters/pytorch.py"], capture_output=True, text=True,
                              cwd=ROOT)
    if released.returncode != 0:  # a shallow clone without that commit: nothing to compare with
        pytest.skip(f"commit 927c159 is not in this clone: {released.stderr.strip()}")
    ours = Path(ROOT / "tests/contract/legacy/pytorch_v1.py").read_text()
    body = ours.split('"""\n', 1)[1]
    want = released.stdout.split('"""\n', 1)[1]
    want = want.replace("class PyTorchAdapter(Adapter):", "class PyTorchV1Adapter(Adapter):")
    want = want.replace('    name = "pytorch"\n', '    name = "pytorch_v1"\n')
    assert body == want
