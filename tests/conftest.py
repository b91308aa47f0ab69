"""Shared fixtures. Tests never need a GPU; GPU tests carry the ``gpu`` marker and skip, saying why."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.base import OptimizerSpec
from harness.config.trial import TrialSpec
from harness.data import DataRequest, PreparedData, prepare

pytest_plugins = ["tests.scheduling", "tests.tiers"]  # xdist units, their order, the `alone` lock; the tiers

# Tests point BATCHSCOPE_CACHE at temporary folders (each its own data cache); the frameworks' managed environments
# stay where `make test` built them (`batchscope env build`), so no test rebuilds one. A test of the build itself
# sets BATCHSCOPE_ENVS to a folder of its own.
if not os.environ.get("BATCHSCOPE_ENVS"):
    from harness.envs.spec import envs_root

    os.environ["BATCHSCOPE_ENVS"] = str(envs_root())

# JAX's persistent compilation cache, kept from one test session to the next beside the environments (issue 53): a
# program is compiled once per JAX version, device and program, not once per session. The session's data cache
# (`cache_dir`: the sweeps' workers) and the contract probes use it; the tests of compiling itself (a cold then warm
# cache, tests/adapters/test_jax_adapter.py) and the max-batch probes (compile_cache=False) keep folders of their
# own. Entries are the compiler's output, so what a test computes is the same warm or cold.
COMPILE_CACHE_ENV = "BATCHSCOPE_TEST_COMPILE_CACHE"
if not os.environ.get(COMPILE_CACHE_ENV):
    os.environ[COMPILE_CACHE_ENV] = str(Path(os.environ["BATCHSCOPE_ENVS"]).parent / "test-compile-cache")


def _gpu_reason() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return None if count else "no NVIDIA GPU on this machine (NVML sees 0 devices)"
    except Exception as e:  # noqa: BLE001 - any NVML failure means: no usable GPU here
        return f"no NVIDIA GPU on this machine ({type(e).__name__}: {e})"


def gpu_build_reason(framework: str) -> str | None:
    """Why a GPU test of ``framework`` cannot run here, or None: no GPU, the framework not installed, or its
    installed build CPU only (a GPU machine with ``tensorflow-cpu``: issue 29). Read without importing it."""
    import importlib.util

    from harness import registry

    reason = _gpu_reason()
    if reason is not None:
        return f"GPU test skipped: {reason}"
    try:
        cls = registry.adapter_class(framework)
    except Exception as e:  # noqa: BLE001 - an adapter that cannot load is a framework that is not here
        return f"GPU test skipped: the {framework} adapter cannot be loaded ({e})"
    from harness.envs.resolve import managed_interpreter
    from harness.envs.spec import chosen_kind

    chosen = managed_interpreter(framework, chosen_kind(True))  # a framework's build is its environment's
    if chosen.source != "parent":
        if chosen.problem:
            return f"GPU test skipped: {framework}'s environment could not be built ({chosen.problem.splitlines()[0]})"
        if chosen.facts.get("gpu") is False:
            return (f"GPU test skipped: {framework}'s environment holds {chosen.facts.get('build')} (README, \"On a "
                    "GPU machine\")")
        return None
    if importlib.util.find_spec(cls.import_name) is None:
        return f"GPU test skipped: {framework} is not installed (pip install 'batchscope[{framework}]')"
    build = cls.gpu_build()
    if build is not None and build.gpu is False:
        return f"GPU test skipped: the installed {framework} is {build.label} (README, \"On a GPU machine\")"
    return None


def skip_unless_gpu_build(framework: str) -> None:
    """Skip the calling test, saying why, unless ``framework`` can run on a GPU here (:func:`gpu_build_reason`)."""
    reason = gpu_build_reason(framework)
    if reason is not None:
        pytest.skip(reason)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip where NVML sees no GPU; ``no_gpu`` tests (what a user without one sees) skip where
    it sees one. Either way the skip says why."""
    reason = _gpu_reason()
    if reason is None:
        skip = pytest.mark.skip(reason="no-GPU test skipped: this machine has an NVIDIA GPU")
        marker = "no_gpu"
    else:
        skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
        marker = "gpu"
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The test running now, its fixtures' set-up and teardown included, for
    :func:`tests.helpers.processes.check_may_start`."""
    from tests.helpers.processes import RUNNING

    RUNNING.append(item)
    yield
    RUNNING.remove(item)


@pytest.fixture(autouse=True)
def _no_refused_process_start(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under ``make test-fast``: a process start refused while this test ran fails it, even where the code under
    test caught the refusal (tests/helpers/processes.py)."""
    yield
    from tests.helpers.processes import violations_of

    refused = violations_of(request.node.nodeid)
    if refused:
        pytest.fail(refused[0], pytrace=False)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cache")
    shared = Path(os.environ[COMPILE_CACHE_ENV])
    shared.mkdir(parents=True, exist_ok=True)
    (path / "compile").symlink_to(shared, target_is_directory=True)  # harness.run.worker.trial.compile_cache_dir
    os.environ["BATCHSCOPE_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def tiny_data(cache_dir: Path) -> PreparedData:
    return prepare(DataRequest(name="synthetic", synthetic_shape=(1, 8, 8), synthetic_classes=3,
                               synthetic_samples=64), cache_dir)


def make_trial(framework: str = "fake", batch_size: int = 4, **kw: object) -> TrialSpec:
    base: dict[str, object] = dict(
        experiment="test", framework=framework, model="osu_cnn", dataset="synthetic", batch_size=batch_size,
        repeat=0, seed=0, epochs=0, warmup_steps=1, timed_steps=3, optimizer=OptimizerSpec(lr=0.01),
        device="cpu", threads=1, timeout_s=60.0, eval=True, eval_batch_size=32)
    base.update(kw)
    return TrialSpec(**base)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    # here, not in pyproject.toml: a change there rebuilds every checkout's .venv (the Makefile's stamp)
    config.addinivalue_line("markers", "process: starts a process (a worker, even the fake adapter's; batchscope in "
                                       "an interpreter of its own; pip; a lock holder), or its subject is one (a "
                                       "signal, a kill, a broken pipe, an OS limit); `make test-fast` leaves these "
                                       "out (tests/helpers/processes.py)")
    from tests.helpers.processes import FAST_ENV, guard_process_starts

    if os.environ.get(FAST_ENV):
        # platform.uname()'s processor is read once per interpreter by running `uname -p` (platform.platform(), in
        # every run's machine facts): read here, before the guard, so that no test is charged with the interpreter's
        # first read, whichever test runs first in a worker
        platform.uname().processor  # noqa: B018
        guard_process_starts()


def pytest_addoption(parser: pytest.Parser) -> None:
    # Here, not in tests/contract/conftest.py: pytest reads options only from the root conftest.
    parser.addoption("--adapter", action="append", default=[], metavar="NAME",
                     help="run the contract suite (tests/contract) against this registered adapter only, or "
                          "against module:Class; repeatable. Default: every registered adapter.")
