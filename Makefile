# The two commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[openai]'
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/python examples/quickstart.py
	$(BIN)/python examples/chat_sqlite.py
	$(BIN)/python examples/chat_openai.py
	$(BIN)/python examples/notes_and_stats.py
	$(BIN)/python examples/plan_apply.py
	$(BIN)/python examples/plan_driver.py

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks

typecheck: $(STAMP_DEV)
	$(BIN)/mypy --strict src tests examples benchmarks

# Two workers: the suite uses both cores of the 2-core machines it runs on.
pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -n 2

test: lint typecheck pytest

bench: $(STAMP_DEV)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
