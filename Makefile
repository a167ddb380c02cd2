# Reckon: `make run` serves the console with its workers; `make test` runs the whole suite.
# Debug is off unless asked for: these targets are local development, and say so.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV := RECKON_DEBUG=true
# The console's port: `make run PORT=8001`. The sandboxes follow RECKON_SANDBOX_URL, RECKON_SMTP_PORT
# and RECKON_SMTP_LOOKUP_URL (docs/configuration.md).
PORT ?= 8000

.PHONY: run test test-fast bandit check bench chaos clean-db docs wheel

# Python writes its bytecode caches (into .venv and __pycache__/, both ignored by git) even where the
# environment sets PYTHONDONTWRITEBYTECODE, as this machine's does: without them every process the
# suite starts compiled every module it imported, every time (a `manage.py check` 2.7 s instead of
# 1.3 s; collecting the tests 14.6 s instead of 6.2 s, in each pytest worker).
unexport PYTHONDONTWRITEBYTECODE

# Reckon is installed editable, as one package with its worker client (pyproject.toml): the tests,
# the examples and the chaos workers import the server's packages and reckon_client
# (clients/python/src) from the checkout as it is, and `.venv/bin/reckon` is manage.py. The `bench`
# extra is the peers the benchmark measures beside Reckon (bench/peers.py), pinned; `docs` the docs
# site's tools (mkdocs.yml). Nothing is
# byte-compiled up front (a third of the install's time): a module is, when first imported (its
# cache written then, see above).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile --editable ".[test,bench,frameworks,docs]"
	rm -rf build *.egg-info
	touch $(STAMP)

run: $(STAMP)
	$(DEV) RECKON_DEMO=true $(BIN)/python manage.py runstack --port $(PORT)

# The sign-in tests' identity provider (tests/oidc: the oidc-provider package, pinned by its lock file).
OIDC_PROVIDER := tests/oidc/node_modules/.package-lock.json
$(OIDC_PROVIDER): tests/oidc/package.json tests/oidc/package-lock.json
	cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error

# LangGraph's agent (tests/frameworks/test_langgraph.py) in an environment of its own: its MCP adapter
# requires mcp<2, the server pins 2.3.0 (tests/frameworks/langgraph/requirements.txt, pinned).
LANGGRAPH_VENV := .venv-langgraph
LANGGRAPH := $(LANGGRAPH_VENV)/.installed
$(LANGGRAPH): tests/frameworks/langgraph/requirements.txt
	test -x $(LANGGRAPH_VENV)/bin/python || $(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet --no-compile -r $<
	touch $@

# The Vercel AI SDK's example agent (examples/frameworks/vercel-ai: ai and @ai-sdk/mcp, pinned by its
# lock file), which tests/frameworks/test_vercel_ai.py runs.
VERCEL_AI := examples/frameworks/vercel-ai/node_modules/.package-lock.json
$(VERCEL_AI): examples/frameworks/vercel-ai/package.json examples/frameworks/vercel-ai/package-lock.json
	cd examples/frameworks/vercel-ai && npm ci --no-audit --no-fund --loglevel=error

# The suite runs on TEST_WORKERS pytest-xdist workers, a file at a time each (module fixtures are
# started once), each worker on its own test database (pytest-django suffixes its name) and every
# child process on a free port. Much of the suite waits on real processes, so a third worker helps
# even on two cores: the whole suite took 495 s on three and 551 s on two (pytest, one tree, one
# machine, in turn). `make test TEST_WORKERS=0` runs it in one process. The files are handed out
# in the order collected, the longest first (tests/conftest.py LONGEST_FIRST), not xdist's default
# (most tests first), which started the longest last.
TEST_WORKERS ?= 3
test: $(STAMP) $(OIDC_PROVIDER) $(LANGGRAPH) $(VERCEL_AI)
	$(BIN)/ruff check .
	$(BIN)/lint-imports  # the layer contract: [tool.importlinter] in pyproject.toml
	$(BIN)/mypy  # the types: [tool.mypy] in pyproject.toml
	$(DEV) $(BIN)/python manage.py check --fail-level WARNING
	$(MAKE) --no-print-directory bandit
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The edit-run loop: the tests that start no process and commit nothing (tests/conftest.py marks
# the others slow), on two workers, with no lint: 1,888 of 2,144 tests in 2 min 30 s here beside
# other work. CI runs `make test`, all of it.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow" -q

# The static security scan: any finding not reviewed on its line (`# nosec Bxxx  # why`) fails the
# build. Bandit warns "nosec encountered ... but no failed test" for parts of an accepted line that
# it also checks (PyCQA/bandit#1041): those lines are dropped, its other messages kept.
BANDIT_PATHS := alerts api approvals config console gateway ledger reconciliation sandbox sso chaos bench clients
bandit: $(STAMP)
	@err=$$(mktemp); $(BIN)/bandit -q -r $(BANDIT_PATHS) -c pyproject.toml 2>$$err; status=$$?; \
	grep -v "but no failed test" $$err >&2; rm -f $$err; \
	if [ $$status -eq 0 ]; then echo "bandit: no unreviewed findings"; fi; exit $$status

# The docs site from docs/ (mkdocs.yml), served with live reload on http://127.0.0.1:$(DOCS_PORT)/.
# `make test` builds it with --strict (tests/docs/test_site.py).
DOCS_PORT ?= 8002
docs: $(STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

# The wheel a host installs (docs/deploying/several-hosts.md), in dist/. setuptools builds in the
# checkout: its build/ and .egg-info are removed after, as after the install above.
wheel: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .
	rm -rf build *.egg-info

# The full benchmark (a million-attempt ledger; several minutes) and the full chaos matrix.
bench: $(STAMP)
	$(DEV) $(BIN)/python manage.py bench --json bench-report.json

chaos: $(STAMP)
	$(DEV) $(BIN)/python manage.py chaos --runs-per-point 50 --random-minutes 30 --json chaos-report.json

check: $(STAMP)
	$(DEV) $(BIN)/python manage.py ledger_check

# Stops the embedded PostgreSQL (data stays in .pgdata/; `make run` stops it too when it started it).
# It reads .env as the settings do, for RECKON_PGDATA_DIR and RECKON_PG_PORT.
clean-db: $(STAMP)
	$(BIN)/python -c "import sys; sys.path.insert(0, '.'); from pathlib import Path; from config.env import load_dotenv; \
	load_dotenv(Path('.env')); from config.localdb import stop_cluster; stop_cluster()"
