# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
export HOST PORT

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-pipecat.txt | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.txt
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
	@echo "  Private API key: $$(tail -n 1 var/seed.out)"
	@echo "  Try: curl -H \"Authorization: Bearer $$(tail -n 1 var/seed.out)\" \"http://$(HOST):$(PORT)/v1/agents?includeActiveDeployment=true\""
	@echo
	@echo "  A demo bot streams live sessions into it (log: var/demo-bot.log). Ctrl-C stops both."
	@echo
	@$(BIN)/python manage.py demo_bot > var/demo-bot.log 2>&1 & bot=$$!; \
	trap 'kill $$bot 2>/dev/null' EXIT INT TERM; \
	$(BIN)/daphne -b $(HOST) -p $(PORT) dashboard.asgi:application

test: $(VENV)/.installed node_modules/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	node_modules/.bin/biome lint
	node --test tests/js/
	$(BIN)/python -m pytest

lint: $(VENV)/.installed node_modules/.installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	node_modules/.bin/biome lint

clean:
	rm -rf $(VENV) node_modules var db.sqlite3 db.sqlite3-shm db.sqlite3-wal staticfiles
