# The two commands a newcomer needs: `make serve` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
MODEL  ?=
PORT   ?= 8000

.PHONY: install install-dev serve migrate lint typecheck layers test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

serve: install
	$(BIN)/bosun serve --dev --port $(PORT) $(if $(MODEL),--model $(MODEL))

migrate: install
	$(BIN)/bosun migrate

lint: install-dev
	$(BIN)/ruff check src tests bench migrations
	$(BIN)/ruff format --check src tests bench migrations

typecheck: install-dev
	$(BIN)/mypy src

# Imports must point down the layers (needs ../shared next to the checkout).
layers:
	$(PYTHON) ../shared/tools/check_layers.py src

test: lint typecheck
	$(BIN)/pytest -q

bench: install-dev
	$(BIN)/python bench/sse_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
