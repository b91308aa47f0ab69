# Two commands do all the set-up on a fresh machine (README): `make quick` and `make test`.
# `make quick` ends with the answer: the recommended batch size per framework (also page 1 of the PDF).
# The virtual environment lives in .venv and is rebuilt only when pyproject.toml or constraints.txt change.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT ?= results/quick

.PHONY: quick test lint bench lock clean-venv

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

quick: $(STAMP)
	$(BIN)/batchscope run experiments/quick.toml --out $(OUT) --resume
	$(BIN)/batchscope compare $(OUT)
	$(BIN)/batchscope report $(OUT) -o $(OUT)/report.pdf
	$(BIN)/batchscope recommend $(OUT)

test: $(STAMP)
	$(BIN)/python -m pytest

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
