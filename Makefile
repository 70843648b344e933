# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export HOST PORT

.PHONY: run test prerequisites lint bench clean sdk sdk-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-pipecat.txt sdk/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e ./sdk  # edits to sdk/src are live while developing
	touch $@

# Biome lints the pages' ES modules; pinned exactly in package.json (its platform binary is pinned by
# Biome itself), installed here, never globally.
node_modules/.installed: package.json
	npm install --silent --no-audit --no-fund --no-package-lock
	touch $@

run: $(VENV)/.installed
	@$(BIN)/python -c "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('$(HOST)', $(PORT)))" 2>/dev/null \
	  || { echo "Port $(PORT) on $(HOST) is taken: stop what holds it, or run 'make run PORT=8001'."; exit 1; }
	$(BIN)/python manage.py migrate --noinput
	@mkdir -p var && $(BIN)/python manage.py seed_demo > var/seed.out
	@echo
	@echo "  RTVI dashboard: http://$(HOST):$(PORT)/"
	@grep '^Login:' var/seed.out | sed 's/^/  /'
	@grep '^Organization:' var/seed.out | sed 's/ ([^)]*)$$//; s/^/  /'
	@grep '^Ingest token:' var/seed.out | sed 's/$$/   (for your own bots: RTVI_DASHBOARD_TOKEN)/; s/^/  /'
	@echo "  Private API key: $$(tail -n 1 var/seed.out)"
	@echo "  Try: curl -H \"Authorization: Bearer $$(tail -n 1 var/seed.out)\" \"http://$(HOST):$(PORT)/v1/agents?includeActiveDeployment=true\""
	@echo
	@echo "  A demo bot streams live sessions into it (log: var/demo-bot.log). Ctrl-C stops both."
	@echo
	@$(BIN)/python manage.py demo_bot --record-audio --token "$$(sed -n 's/^Ingest token: //p' var/seed.out)" > var/demo-bot.log 2>&1 & bot=$$!; \
	trap 'kill $$bot 2>/dev/null' EXIT INT TERM; \
	$(BIN)/daphne -b $(HOST) -p $(PORT) --websocket_connect_timeout 30 dashboard.asgi:application

# Every test runs: a machine that lacks Chromium, espeak-ng, Node.js, Redis or PostgreSQL stops at once
# (tests/prerequisites.py says what and the one command, `sudo .ci/run`), and pytest runs with CI=true,
# under which a test that finds something missing fails rather than skips.
test: prerequisites $(VENV)/.installed node_modules/.installed sdk-test
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	node_modules/.bin/biome lint
	node --test tests/js/
	CI=true $(BIN)/python -m pytest

prerequisites:
	@$(PYTHON) tests/prerequisites.py

# The bot package as a bot installs it: `pip install "./sdk[pipecat]"` in a fresh virtual environment
# that has nothing of the server, then its own tests there, one of them a real Pipecat pipeline
# streaming into a live dashboard (run from the project's venv, DASHBOARD_PYTHON).
SDK_VENV := .venv-sdk
sdk-test: $(VENV)/.installed
	rm -rf $(SDK_VENV) && $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/pip install --quiet "./sdk[pipecat]" pytest==9.2.0 pytest-asyncio==1.5.0
	cd sdk && CI=true DASHBOARD_PYTHON=$(CURDIR)/$(BIN)/python ../$(SDK_VENV)/bin/python -m pytest -q -p no:cacheprovider tests

# A wheel and an sdist of the bot package, in sdk/dist/.
sdk: $(VENV)/.installed
	$(BIN)/python -m build --outdir sdk/dist sdk

lint: $(VENV)/.installed node_modules/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	node_modules/.bin/biome lint

clean:
	rm -rf $(VENV) node_modules var db.sqlite3 db.sqlite3-shm db.sqlite3-wal staticfiles
