# Reckon: `make run` serves the console with its workers; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check clean-db

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet ".[test]"
	rm -rf build *.egg-info
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py runstack

test: $(STAMP)
	$(BIN)/python manage.py check --fail-level WARNING
	$(BIN)/python -m pytest

check: $(STAMP)
	$(BIN)/python manage.py ledger_check

# Stops the embedded PostgreSQL (data stays in .pgdata/).
clean-db: $(STAMP)
	$(BIN)/python -c "import sys; sys.path.insert(0, '.'); from config.localdb import stop_cluster; stop_cluster()"
