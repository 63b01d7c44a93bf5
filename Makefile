# gpupool: `make run` starts the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck contracts unit bench browser clean k8s-fixture

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpupool serve --demo --cluster examples/cluster.yaml --queues examples/queues.yaml \
		--elastic examples/elastic.yaml --cloud examples/cloud.yaml --state .gpupool/state.db \
		--port $(or $(PORT),8080)

# Debian's chromium, for the dashboard test (skipped there with a reason if it cannot be had).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
				chromium >/dev/null || echo "browser: chromium could not be installed"; \
		else echo "browser: no chromium and no root apt-get; the dashboard test will skip"; fi; }

test: $(STAMP) k8s-fixture lint typecheck contracts unit

# kube-apiserver, kube-scheduler, kube-controller-manager for tests/k8s, built once and
# cached (scripts/k8s-fixture.sh); when they cannot be built, those tests skip and say why.
k8s-fixture:
	scripts/k8s-fixture.sh install || echo "k8s-fixture: not built; tests/k8s will skip"

lint: $(STAMP)
	$(BIN)/ruff check src tests

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
