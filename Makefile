# Two commands do all the set-up on a fresh machine:
#   make run    start a local cluster (name server + one broker) in the foreground, and the web
#               dashboard at http://127.0.0.1:8080; Ctrl-C stops them
#   make test   lint, type-check and run the whole test suite (installs Debian's chromium for the
#               dashboard's browser tests when it is missing)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DATA   ?= ./.data
DASHBOARD_PORT ?= 8080

.PHONY: run test lint typecheck pytest chromium bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@# The broker's flush tests watch its system calls with strace: install it where we can.
	@command -v strace >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get install -y -qq strace >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq strace >/dev/null)); } \
		|| echo "note: strace is not installed; tests/broker's flush tests need it"
	@touch $(STAMP)

# The dashboard runs in the background and goes when the cluster stops (it keeps retrying the
# name server until the cluster is up, showing why on its pages meanwhile).
run: $(STAMP)
	$(VENV)/bin/mqdashboard --namesrv 127.0.0.1:9876 --port $(DASHBOARD_PORT) & dashboard=$$!; \
	trap 'kill $$dashboard 2>/dev/null; wait $$dashboard' EXIT INT TERM; \
	$(PY) -m aiorocketmq.broker.local_cluster --data $(DATA)

test: lint typecheck chromium pytest

# tests/dashboard drive Debian's chromium through Playwright (which never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
