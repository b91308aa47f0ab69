# Two commands do all the set-up on a fresh machine (README): `make quick` and `make test`.
# `make quick` ends with the answer: the recommended batch size per framework (also page 1 of the PDF).
# The virtual environment lives in .venv and is rebuilt only when pyproject.toml or constraints.txt change.
PY ?= python3
# GPU=1 (README, "On a GPU machine"): each framework's managed environment is built from its CUDA lock
# (adapters/<framework>/locks/cuda.txt; MXNet has none: its CUDA wheels are retired, so the quick run leaves it out).
# The parent's .venv is the same on every machine: it holds no framework (docs/environments.md).
GPU ?=
, := ,
VENV := .venv
QUICK_FLAGS := $(if $(GPU),--frameworks pytorch$(,)tensorflow$(,)jax)
export BATCHSCOPE_ENV_KIND := $(if $(GPU),cuda,$(BATCHSCOPE_ENV_KIND))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= $(if $(GPU),results/quick-gpu,results/quick)

.PHONY: quick test test-all test-changed test-fast test-durations lint bench lock locks envs clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# each framework's managed environment, built ahead (run and maxbatch build what they need on first use)
envs: $(STAMP)
	$(BIN)/batchscope env build

quick: $(STAMP)
	$(BIN)/batchscope run experiments/quick.toml --out $(OUT) --resume $(QUICK_FLAGS)
	$(BIN)/batchscope compare $(OUT)
	$(BIN)/batchscope report $(OUT) -o $(OUT)/report.pdf
	$(BIN)/batchscope recommend $(OUT)

# Two pytest-xdist workers (most of the time is frameworks starting in subprocesses, one core each); the units,
# their order and the tests that run alone are tests/scheduling.py's. `make test-durations` re-records the order.
# The framework environments are built first (once; reused while their locks are unchanged), so that no test's
# time limit counts a build.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
# Bytecode cached even where the environment says not to (PYTHONDONTWRITEBYTECODE=1, common in Python images, and
# set on this project's CI machine): without it each xdist worker rewrites every test module's asserts again
# (~8 s of collection per worker) and each of the suite's worker processes compiles batchscope's modules again
# (~0.07 s a start). The caches are __pycache__ folders in the checkout, which git ignores (docs/benchmarks.md).
TEST_ENV := PYTHONDONTWRITEBYTECODE=

# Two tiers (tests/tiers.py). `make test`: every test but the `heavy` ones; every built-in framework really runs
# (the run fails if one missed its contract probe, shared sweep, max-batch search or environment). `make test-all`:
# all of it, the heavy tests too (exhaustive searches, --verify, CUDA lock resolutions, Ray's simulated nodes, the
# chaos soak, the GPU check's dry run); passed on a tree with nothing uncommitted, it records HEAD in
# .ci/test-all-passed (commit that file). `make test-changed` (CI's second step): the heavy tests whose guarded code
# changed since that commit (CHANGED_SINCE=REF for another); none selected (pytest's exit 5) is a pass.
# the frameworks that must really run (GPU=1: MXNet has no CUDA build, so none of its tests run there)
REQUIRE := BATCHSCOPE_REQUIRE_FRAMEWORKS=$(if $(GPU),pytorch$(,)tensorflow$(,)jax,all)
CHANGED_SINCE ?= recorded

test: envs
	$(TEST_ENV) $(REQUIRE) $(BIN)/python -m pytest $(XDIST) -m 'not heavy'

test-all: envs
	$(TEST_ENV) $(REQUIRE) $(BIN)/python -m pytest $(XDIST)
	@if git diff --quiet HEAD -- && [ -z "$$(git ls-files --others --exclude-standard)" ]; then \
		echo "$$(git rev-parse HEAD)  # make test-all passed here, $$(date -u +%Y-%m-%dT%H:%MZ)" > .ci/test-all-passed; \
		echo "recorded in .ci/test-all-passed: commit it, so that CI's heavy tests count changes from here"; \
	else echo "not recorded in .ci/test-all-passed: the tree has changes not committed"; fi

test-changed: envs
	$(TEST_ENV) $(BIN)/python -m pytest $(XDIST) -m heavy --changed-since=$(CHANGED_SINCE); \
		rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

test-durations: envs
	$(TEST_ENV) $(BIN)/python -m pytest $(XDIST) --update-durations

# the tests that start no framework and no process at all, for the edit-test loop (CI runs `make test`):
# commands are called in the test process (tests/helpers/inprocess.py). The frameworks are blocked
# (tests/fakes/no_frameworks), so a test that starts one without the `slow` marker fails here, saying so; one that
# starts any process (a worker, an interpreter, pip, a mount) without the `process` marker fails too: every start goes
# through tests/helpers/processes.py's guard (a shared fixture's run excepted: `shared_run`).
test-fast: $(STAMP)
	$(TEST_ENV) BATCHSCOPE_TEST_FAST=1 PYTHONPATH=tests/fakes/no_frameworks $(BIN)/python -m pytest $(XDIST) -m 'not slow and not process'

lint: $(STAMP)
	$(BIN)/ruff check harness adapters report tests benchmarks
	$(BIN)/mypy harness adapters report

bench: $(STAMP)
	$(BIN)/python benchmarks/harness_overhead.py
	$(BIN)/python benchmarks/trial_fixed_cost.py

# the parent's pins (constraints.txt) from .venv as it is; `make locks`: each framework's lock resolved anew, with
# the hashes of its files (the current pins held where they still fit; `make locks UPGRADE=1`: newest versions)
UPGRADE ?=
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt.new && mv constraints.txt.new constraints.txt

# the locks resolved anew, then the CUDA locks' download sizes (the refusal of GPU=1 on a machine without a GPU
# names them: harness/envs/sizes.py; PyPI's JSON index, nothing downloaded)
locks: $(STAMP)
	$(BIN)/python -m harness.envs.locking $(if $(UPGRADE),--upgrade)
	$(BIN)/python -m harness.envs.sizes cuda

clean-venv:
	rm -rf $(VENV)
