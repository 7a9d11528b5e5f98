# The set-up commands of the README: `make train`, `make test` (and `make lint`).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# torch/torchvision first, pinned to releases that satisfy pyproject's ranges; where a pip
# constraint file caps them (as on our CI machines) the pin matches the cap.
TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: install install-dev train test test-fast lint docs clean

install:
	$(PYTHON) -c "import torch, torchvision" 2>/dev/null || $(PIP) install $(TORCH)
	$(PIP) install -e .

install-dev:
	$(PYTHON) -c "import torch, torchvision" 2>/dev/null || $(PIP) install $(TORCH)
	$(PIP) install -e ".[dev,export,serve,sweep,streaming,timm,openvino,ray]"

train: install
	$(PYTHON) -m lightning_cls.train

# A test whose xdist worker process dies (killed, or a native crash) runs once more in a fresh
# worker; any other failure is never rerun, and a crash that repeats still fails the run.
RERUN_CRASHED := --reruns 1 --only-rerun "crashed while running"

test: install-dev
	$(PYTHON) -m pytest -n 2 --timeout 600 $(RERUN_CRASHED)

test-fast: install-dev
	$(PYTHON) -m pytest -n 2 -m "not slow" $(RERUN_CRASHED)

# ruff's rules and formatting, as configured in pyproject.toml (`ruff format .` fixes the latter).
lint: install-dev
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

docs: install  # the documentation site, into site/ (broken links and missing references fail)
	$(PIP) install -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

clean:
	rm -rf build dist *.egg-info outputs .pytest_cache
