# gpupool: `make run` starts the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two stamps: `make run` needs the runtime only (pip install -e .); `make test` adds the test
# extras on top of it. Each is redone when pyproject.toml changes.
RUNTIME := $(VENV)/.installed-runtime
STAMP   := $(VENV)/.installed-test

.PHONY: run test lint typecheck contracts unit bench browser prometheus clean k8s-fixture

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

run: $(RUNTIME)
	$(BIN)/gpupool serve --demo --cluster examples/cluster.yaml --queues examples/queues.yaml \
		--elastic examples/elastic.yaml --cloud examples/cloud.yaml --state .gpupool/state.db \
		--port $(or $(PORT),8080)

# Debian's chromium, for the dashboard tests. Installed with apt-get (as root, or through sudo
# when it needs no password); when it cannot be had this says why, and the dashboard tests skip
# with that reason, except under CI, where a skipped real-component test fails the run
# (tests/conftest.py).
SUDO := $(shell [ "$$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && echo sudo; })
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if { [ "$$(id -u)" = 0 ] || [ -n "$(SUDO)" ]; } && command -v apt-get >/dev/null 2>&1; then \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
				--no-install-recommends chromium >/dev/null \
				|| echo "browser: chromium could not be installed"; \
		else echo "browser: no chromium and no root or sudo for apt-get; the dashboard tests" \
			"cannot run"; fi; }

# Debian's prometheus, for the measured-use tests (a real Prometheus scraping the virtual
# cluster's DCGM-format exporter). Installed as chromium is; without it those tests skip,
# saying why, except under CI, where the skip fails the run.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
		if { [ "$$(id -u)" = 0 ] || [ -n "$(SUDO)" ]; } && command -v apt-get >/dev/null 2>&1; then \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
				--no-install-recommends prometheus >/dev/null \
				|| echo "prometheus: prometheus could not be installed"; \
		else echo "prometheus: no prometheus and no root or sudo for apt-get; the" \
			"measured-use tests cannot run"; fi; }

# With CI set (as .ci/run does), a test that needs a real component (browser, API server,
# Prometheus) and skips makes the run fail: green means tested.
test: $(STAMP) browser prometheus k8s-fixture lint typecheck contracts unit

# kube-apiserver, kube-scheduler, kube-controller-manager for tests/k8s, built once and
# cached (scripts/k8s-fixture.sh); when they cannot be built, those tests skip and say why
# (and fail under CI).
k8s-fixture:
	scripts/k8s-fixture.sh install || echo "k8s-fixture: not built; tests/k8s cannot run"

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests scripts

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -n 2

bench: $(STAMP)
	$(BIN)/gpupool bench placement --nodes 10000 --gpus-per-node 8 --pods 100000 --json

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
