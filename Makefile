# The two commands a newcomer needs: `make serve` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The model `make serve` uses: yours if a provider key is set, else the scripted demo.
MODEL  ?= $(if $(ANTHROPIC_API_KEY),anthropic:claude-haiku-4-5,$(if $(OPENAI_API_KEY),openai:gpt-4.1-mini,scripted:examples/hello.yaml))
PORT   ?= 8000

.PHONY: install install-dev serve migrate settings-doc lint typecheck test bench clean

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
	$(BIN)/bosun serve --dev --toolset demo --port $(PORT) --model $(MODEL)

migrate: install
	$(BIN)/bosun migrate

# docs/settings.md's table, generated from the settings model (run it after adding a setting).
settings-doc: install
	$(BIN)/python -m bosun.settings_doc

lint: install-dev
	$(BIN)/ruff check src tests bench migrations
	$(BIN)/ruff format --check src tests bench migrations
	$(BIN)/lint-imports  # the import contracts in pyproject.toml (docs/architecture.md)

typecheck: install-dev
	$(BIN)/mypy src

# The suite in 4 worker processes, a module's tests on one worker (some share a
# module-scoped server and build on each other's state). Four even on two cores: the
# workers mostly wait on servers, subprocesses and browsers (CPU was 12 of 14 minutes'
# wall time with two). Modules go out in collection order, the slowest first (see
# SLOWEST_FIRST in tests/conftest.py), not xdist's largest-first, which left the slowest
# (schemathesis, one module of two long tests) to run alone at the end; that module's two
# tests go to two workers (SPLIT). `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 4

# Bytecode is compiled once first: where PYTHONDONTWRITEBYTECODE is set (this CI's machines)
# every `bosun` subprocess a test starts would otherwise compile src/ again (0.24 s of CPU).
test: lint typecheck
	$(BIN)/python -m compileall -q src
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --maxprocesses 4 --dist loadscope --no-loadscope-reorder

bench: install-dev
	$(BIN)/python bench/sse_throughput.py
	$(BIN)/python bench/plan_parallel.py
	$(BIN)/python bench/cli_start.py
	$(BIN)/python bench/run_trigger.py
	$(BIN)/python bench/runs_scale.py  # PostgreSQL rows need BOSUN_TEST_POSTGRES_URL's server (else skipped)
	$(BIN)/python bench/dispatch_history.py  # likewise
	$(BIN)/python bench/session_age.py
	$(BIN)/python bench/tracing_cost.py
	$(BIN)/python bench/peers.py  # the peers need the bench extra: pip install -e '.[bench]'

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
