# Two commands do all the set-up on a fresh machine (README): `make quick` and `make test`.
# `make quick` ends with the answer: the recommended batch size per framework (also page 1 of the PDF).
# The virtual environment lives in .venv and is rebuilt only when pyproject.toml or constraints.txt change.
PY ?= python3
# GPU=1 (README, "On a GPU machine"): a venv of its own, .venv-gpu, with the frameworks' CUDA builds (the `gpu`
# extra under constraints-gpu.txt: never beside tensorflow-cpu, which installs the same `tensorflow` module), and
# the quick run limited to the frameworks that have a GPU build (MXNet's CUDA wheels are retired: README)
GPU ?=
, := ,
VENV := $(if $(GPU),.venv-gpu,.venv)
EXTRAS := $(if $(GPU),gpu,dev)
CONSTRAINTS := -c constraints.txt $(if $(GPU),-c constraints-gpu.txt)
QUICK_FLAGS := $(if $(GPU),--frameworks pytorch$(,)tensorflow$(,)jax)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= $(if $(GPU),results/quick-gpu,results/quick)

.PHONY: quick test test-fast test-durations lint bench lock clean-venv

$(STAMP): pyproject.toml constraints.txt $(if $(GPU),constraints-gpu.txt)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

quick: $(STAMP)
	$(BIN)/batchscope run experiments/quick.toml --out $(OUT) --resume $(QUICK_FLAGS)
	$(BIN)/batchscope compare $(OUT)
	$(BIN)/batchscope report $(OUT) -o $(OUT)/report.pdf
	$(BIN)/batchscope recommend $(OUT)

# Two pytest-xdist workers (most of the time is frameworks starting in subprocesses, one core each); the units,
# their order and the tests that run alone are tests/scheduling.py's. `make test-durations` re-records the order.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadgroup

test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST)

test-durations: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) --update-durations

# the tests that start no framework, for the edit-test loop (CI runs `make test`). The frameworks are blocked
# (tests/fakes/no_frameworks), so a test that starts one without the `slow` marker fails here, saying so.
test-fast: $(STAMP)
	PYTHONPATH=tests/fakes/no_frameworks $(BIN)/python -m pytest $(XDIST) -m 'not slow'

lint: $(STAMP)
	$(BIN)/ruff check harness adapters report tests benchmarks
	$(BIN)/mypy harness adapters report

bench: $(STAMP)
	$(BIN)/python benchmarks/harness_overhead.py
	$(BIN)/python benchmarks/trial_fixed_cost.py

lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu//' > constraints.txt.new && mv constraints.txt.new constraints.txt

clean-venv:
	rm -rf $(VENV)
