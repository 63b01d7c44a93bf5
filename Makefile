# gpupool: `make run` starts the main job, `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck contracts unit bench clean k8s-fixture

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpupool demo

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
