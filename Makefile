# The set-up commands of the README: `make train`, `make test` (and `make lint`).
#
# Everything installs into a virtual environment of its own ($(VENV), created on first use),
# never into whatever the machine's Python has, and from constraints.txt: the exact versions
# the suite last passed with. A new release of any dependency reaches this project only through
# `make refresh-constraints` (resolve the newest versions, run the suite, rewrite the file), a
# deliberate step reviewed in its own commit.
PYTHON ?= python3
# The oldest Python the project runs on: pyproject's requires-python, ruff's target-version and
# the README say the same (tests/test_packaging.py); constraints.txt pins numpy and scipy
# releases that need it. The venv is not created with an older one.
MIN_PYTHON := 3.11
VENV ?= .venv
VPYTHON := $(VENV)/bin/python
PIP := $(VPYTHON) -m pip
CONSTRAINTS ?= constraints.txt
CONSTRAIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# torch/torchvision first, pinned to releases that satisfy pyproject's ranges; where a pip
# constraint file caps them (as on our CI machines) the pin matches the cap.
TORCH := torch==2.14.1 torchvision==0.29.1
REFRESH_VENV := .venv-refresh

.PHONY: install install-dev train test test-slow lint docs clean refresh-constraints venv-litert venv-peers

$(VPYTHON):
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; need = tuple(map(int, "$(MIN_PYTHON)".split("."))); sys.exit(0 if v >= need else f"error: $(PYTHON) is Python {v[0]}.{v[1]}; lightning_cls needs Python >= $(MIN_PYTHON); run make PYTHON=python$(MIN_PYTHON) (or newer).")'
	$(PYTHON) -m venv $(VENV)

install: $(VPYTHON)
	$(PIP) install $(CONSTRAIN) $(TORCH)
	$(PIP) install $(CONSTRAIN) -e .

install-dev: $(VPYTHON)
	$(PIP) install $(CONSTRAIN) $(TORCH)
	$(PIP) install $(CONSTRAIN) -e ".[dev,export,serve,sweep,streaming,timm,openvino,ray,doctor,executorch,coreml,litert]"

# The LiteRT converter (litert-torch, export=litert) in an environment of its own, layered on
# $(VENV): a .pth file adds $(VENV)'s site-packages (torch, ai-edge-litert, lightning_cls) behind
# its own with site.addsitedir, so their .pth files run too (the editable install's hook: the
# project imports from any folder), and only what litert-torch needs differently
# (typing-extensions<4.13 for xdsl, pydantic 2.11) is installed there, shadowing $(VENV)'s copies
# for this environment only; pip leaves $(VENV) untouched ("outside environment"). Export with
# $(LITERT_VENV)/bin/python -m lightning_cls.export export=litert; predict/serve the .tflite
# from $(VENV).
LITERT_VENV ?= .venv-litert
LITERT_TORCH := litert-torch==0.10.0

venv-litert: install-dev
	$(VPYTHON) -m venv $(LITERT_VENV)  # the same Python as $(VENV)
	$(VPYTHON) -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' > \
	  "$$($(LITERT_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_lightning_cls_base.pth"
	$(LITERT_VENV)/bin/python -m pip install $(LITERT_TORCH)
	$(LITERT_VENV)/bin/python -c 'import litert_torch, torch; print("litert-torch ready, torch", torch.__version__)'

# The serving peers of benchmarks/serve_peers.py, each in an environment of its own (their pins
# clash with the project's: kserve would downgrade pandas, protobuf and psutil): MLServer 1.7.1
# (uvloop < 0.22: its inference-pool workers call asyncio.get_event_loop(), which newer uvloop
# refuses) and KServe's model server 0.21.0, each with the onnxruntime of constraints.txt.
MLSERVER_VENV ?= .venv-mlserver
KSERVE_VENV ?= .venv-kserve
ORT_PIN = $$(grep '^onnxruntime==' constraints.txt)

venv-peers:
	$(PYTHON) -m venv $(MLSERVER_VENV)
	$(MLSERVER_VENV)/bin/python -m pip install -q mlserver==1.7.1 "uvloop<0.22" $(ORT_PIN)
	$(PYTHON) -m venv $(KSERVE_VENV)
	$(KSERVE_VENV)/bin/python -m pip install -q kserve==0.21.0 $(ORT_PIN)

train: install
	$(VPYTHON) -m lightning_cls.train

# A test whose xdist worker process dies (killed, or a native crash) runs once more in a fresh
# worker; any other failure is never rerun, and a crash that repeats still fails the run.
RERUN_CRASHED := --reruns 1 --only-rerun "crashed while running"

# The environment's own scripts (torchrun, ...) first on PATH, as an activated venv would have them.
# Python may cache compiled modules (__pycache__/, git-ignored) even where the environment says
# not to (PYTHONDONTWRITEBYTECODE=1, as on our CI machines): otherwise every fresh interpreter the
# suite starts compiles the package's modules again (~0.3 s each), and each pytest worker rewrites
# every test module's asserts again (~4 s of collection).
IN_VENV := PATH="$(abspath $(VENV))/bin:$$PATH" PYTHONDONTWRITEBYTECODE=

# make test: the suite without the tests marked slow (each > ~20 s: the SLURM cluster, the
# benchmarks' --quick runs, whole-guide runs); make test-slow: those; .ci/run runs both.
test: install-dev
	$(IN_VENV) $(VPYTHON) -m pytest -n 2 -m "not slow" --timeout 600 --durations=20 $(RERUN_CRASHED)

test-slow: install-dev
	$(IN_VENV) $(VPYTHON) -m pytest -n 2 -m slow --timeout 600 --durations=20 $(RERUN_CRASHED)

# ruff's rules and formatting, as configured in pyproject.toml (`ruff format .` fixes the latter).
lint: install-dev
	$(VPYTHON) -m ruff check .
	$(VPYTHON) -m ruff format --check .

docs: install  # the documentation site, into site/ (broken links and missing references fail)
	$(PIP) install $(CONSTRAIN) -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VPYTHON) -m mkdocs build --strict

# The newest versions pyproject's ranges admit, in a fresh environment, with no constraints:
# the docs build and the whole suite must pass before constraints.txt is rewritten.
refresh-constraints:
	rm -rf $(REFRESH_VENV)
	$(MAKE) docs test VENV=$(REFRESH_VENV) CONSTRAINTS=
	{ echo "# The versions the suite last passed with; rewritten by 'make refresh-constraints'."; \
	  $(REFRESH_VENV)/bin/python -m pip freeze --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(REFRESH_VENV)
	$(MAKE) install-dev docs  # the project's own environment back on the pinned versions

clean:
	rm -rf build dist *.egg-info outputs .pytest_cache
