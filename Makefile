# The two commands of the README: `make demo` and `make test`. Both create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: install test lint demo clean gpu-bundle

# torch goes first, pinned to the CPU build this project is tested with; left to pick torch itself, pip may pull a
# multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fleetpilot needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[server,agent,workload,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Two workers per core: most real-process tests wait on a server or an agent more than they compute. A test module
# stays on one worker (--dist loadfile), so a module's shared server starts once. The 40 slowest in the output.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
test: lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=40

demo: install
	$(BIN)/fleetpilot db upgrade
	$(BIN)/fleetpilot demo

# the wheels of the server's stack for the lent GPU machine, which has no network (scripts/gpu-check.sh installs them)
gpu-bundle: install
	$(BIN)/python scripts/gpu_bundle.py --dest .whl $(if $(BUNDLE_PYTHON),--python-version $(BUNDLE_PYTHON))

clean:
	rm -rf $(VENV) .fleetpilot .pytest_cache .mypy_cache .ruff_cache
