# Reckon: `make run` serves the console with its workers; `make test` runs the whole suite.
# Debug is off unless asked for: these targets are local development, and say so.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV := RECKON_DEBUG=true

.PHONY: run test check bench chaos clean-db

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet ".[test]"
	rm -rf build *.egg-info
	touch $(STAMP)

run: $(STAMP)
	$(DEV) RECKON_DEMO=true $(BIN)/python manage.py runstack

test: $(STAMP)
	$(BIN)/ruff check .
	$(DEV) $(BIN)/python manage.py check --fail-level WARNING
	$(BIN)/python -m pytest

# The full benchmark (a million-attempt ledger; several minutes) and the full chaos matrix.
bench: $(STAMP)
	$(DEV) $(BIN)/python manage.py bench --json bench-report.json

chaos: $(STAMP)
	$(DEV) $(BIN)/python manage.py chaos --runs-per-point 50 --random-minutes 30 --json chaos-report.json

check: $(STAMP)
	$(DEV) $(BIN)/python manage.py ledger_check

# Stops the embedded PostgreSQL (data stays in .pgdata/; `make run` stops it too when it started it).
clean-db: $(STAMP)
	$(BIN)/python -c "import sys; sys.path.insert(0, '.'); from config.localdb import stop_cluster; stop_cluster()"
