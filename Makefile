# Two commands do all the set-up on a fresh machine:
#   make run    start a local cluster (name server + one broker) in the foreground, and the web
#               dashboard at http://127.0.0.1:8080; Ctrl-C stops them
#   make test   lint, type-check and run the whole test suite (installs Debian's chromium for the
#               dashboard's browser tests and strace for the broker's flush tests when missing;
#               tests/interop builds its Java and Go programs on first use, see docs/interop.md)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DATA   ?= ./.data
DASHBOARD_PORT ?= 8080

.PHONY: run test lint typecheck pytest chromium strace interop-deps bench clean proto

$(STAMP): pyproject.toml setup.py protocol/_speedups.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The dashboard runs in the background and goes when the cluster stops (it keeps retrying the
# name server until the cluster is up, showing why on its pages meanwhile).
run: $(STAMP)
	$(VENV)/bin/mqdashboard --namesrv 127.0.0.1:9876 --port $(DASHBOARD_PORT) & dashboard=$$!; \
	trap 'kill $$dashboard 2>/dev/null; wait $$dashboard' EXIT INT TERM; \
	$(PY) -m aiorocketmq.broker.local_cluster --data $(DATA)

test: lint typecheck chromium strace pytest

# tests/dashboard drive Debian's chromium through Playwright (which never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# tests/broker's flush tests watch the broker's system calls with strace.
strace:
	@command -v strace >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(VENV)/bin/pytest
	# the protocol and store tests again on the pure-Python codecs (protocol/speedups.py)
	AIOROCKETMQ_PURE=1 $(VENV)/bin/pytest tests/protocol tests/store -q

# Apache RocketMQ's jars (Maven) and the Go client (Go modules) for tests/interop, built into a
# cache outside the repository; the test session does the same on first use.
interop-deps: $(STAMP)
	$(PY) -m tests.interop.harness

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The 5.x gRPC messages and service stubs (broker/grpc/messaging.proto); the output is committed.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		aiorocketmq/broker/grpc/messaging.proto
