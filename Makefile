# feedlab: `make help` lists the targets.
SHELL := /bin/bash
# the first of these that is Python 3.11-3.13 (set PYTHON=... to choose)
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3; do \
	  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null \
	  && { echo $$p; break; }; done)
# the exact versions that made the committed figures; CONSTRAINTS= installs the newest the ranges allow
CONSTRAINTS ?= constraints.txt
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
STAMP := $(VENV)/.feedlab-installed

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-10s %s\n", $$1, $$2}'
	@test -x $(PY) && $(PY) -m feedlab.report.costs 2>/dev/null || echo "measured cost of each target: README.md, 'Two commands' (make install to print it here)"

# Every install goes through lib/feedlab/installer.py (standard library only, so it runs before feedlab is installed):
# uv, put in .venv at the version constraints.txt pins, given what your pip configuration names (indexes, local
# wheels, constraints, certificate); pip where that configuration sets something uv cannot honour, where a uv step
# fails, or with FEEDLAB_INSTALLER=pip. One cache, hard-linked into .venv and each peer venv, so torch is fetched and
# unpacked once; --compile-bytecode writes the .pyc files pip writes (PYTHONDONTWRITEBYTECODE=1 here would otherwise
# have every process compile torch again: 3.3 s an import against 1.8). Every step has a deadline.
INSTALL = $(PY) -P lib/feedlab/installer.py --python $(PY)
DEV_EXTRAS := .[dev,fast]

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PYTHON)" || { echo "need Python 3.11, 3.12 or 3.13 on PATH (or set PYTHON=...)"; exit 1; }
	@test -x $(PY) || timeout 300 $(PYTHON) -m venv $(VENV) || { echo "install: $(PYTHON) -m venv $(VENV) failed"; exit 1; }
	@$(PY) -P lib/feedlab/installer.py bootstrap --python $(PY) $(if $(CONSTRAINTS),--constraints $(CONSTRAINTS),)
	@echo "install: $(PIP_C) -e '$(DEV_EXTRAS)' into $(VENV)"
	@$(INSTALL) --what "feedlab[dev,fast]" -- $(PIP_C) -e '$(DEV_EXTRAS)'
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install feedlab with its dev and fast-path extras

data: $(STAMP) ## build the embedded data sets for PROFILE (default quick) and pack every format
	$(PY) -m feedlab.run --data-only --profile $(PROFILE)

# notebook 13's peers: the `peers` extra in .venv, then a venv of its own for each peer whose pins conflict or
# that builds against system libraries (MosaicML streaming, FFCV, SPDL; apt where we are root, else one line
# naming the packages). Cached: a second run rebuilds nothing. A peer that fails stays in notebook 13 as
# unavailable with the failing step.
peers: $(STAMP) ## install notebook 13's peer loaders (the extra, and .venv-mosaic, .venv-ffcv, .venv-spdl; as root also system packages via apt-get)
	@echo "peers: installs the [peers] extra and three peer venvs; run as root it also apt-get installs their system libraries (otherwise it prints the apt-get line for you to run)"
	grep -E '^(torch|torchvision|numpy)==' constraints.txt > $(VENV)/core-constraints.txt
	@$(INSTALL) --timeout 900 --what "the [peers] extra" -- -c $(VENV)/core-constraints.txt -e '.[peers]' \
	  || echo "peers: the [peers] extra did not install; notebook 13 reports those peers unavailable"
	timeout 2400 $(PY) -m feedlab.peers.venvs build || echo "peers: the peer venvs ran past 40 min"
	@$(PY) -m feedlab.peers.venvs status

# notebook 14's remote decode (Ray Data) and `pack --engine ray`: the `ray` extra, torch/numpy held at the figures'
# versions. Without it notebook 14 cannot measure its Ray parts, and the runner keeps the committed record rather
# than replace it with one lacking their figures (run_record.check_nothing_lost): so `make figures` installs it.
ray: $(STAMP) ## install the `ray` extra (notebook 14's remote decode)
	grep -E '^(torch|torchvision|numpy)==' constraints.txt > $(VENV)/core-constraints.txt
	@$(INSTALL) --timeout 900 --what "the [ray] extra" -- -c $(VENV)/core-constraints.txt -e '.[ray]' || true
	@$(PY) -c 'import ray.data' 2>/dev/null || echo "ray: the [ray] extra did not install; notebook 14's record is kept as committed"

figures: $(STAMP) peers ray ## prepare data and run every notebook (PROFILE=quick|full|smoke), writing figures/ and the README's figure section
	$(PY) -m feedlab.run --profile $(PROFILE)
	@if [ "$(PROFILE)" != smoke ]; then $(PY) -m feedlab.report.readme; fi

# the suite writes its temporaries (pytest's, multiprocessing's, the peers' caches, Ray's session, torch's
# compile cache) under a TMPDIR of its own, removed at the end: yours is left as it was; tests/conftest.py
# fails the run if /dev/shm gained a file
test: $(STAMP) ## lint (ruff), the unit tests but the slow ones, then `make nbval` (its measured time: below)
	$(PY) -m ruff check lib data_prep tests notebooks
	@tmp=$$(mktemp -d -t feedlab-test.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	  TMPDIR=$$tmp FEEDLAB_PROFILE=smoke $(PY) -m pytest -q -m "not slow" tests/unit && \
	  TMPDIR=$$tmp $(MAKE) --no-print-directory nbval

test-slow: $(STAMP) ## the unit tests of 3 s or more (tests/unit/slow_tests.txt: deadlines, subprocesses, whole notebooks); CI runs them after `make test`
	@tmp=$$(mktemp -d -t feedlab-test.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	  TMPDIR=$$tmp FEEDLAB_PROFILE=smoke $(PY) -m pytest -q -m slow tests/unit

# each notebook runs once, under nbval, writing under runs/nbval/ (never figures/); then
# tests/notebooks checks what each recorded (tests/notebooks/nbrun.py)
NB ?= $(wildcard notebooks/[0-9]*.ipynb)
nbval: $(STAMP) ## every notebook once through nbval (smoke profile; NB=notebooks/05_*.ipynb for one), then what each recorded
	FEEDLAB_PROFILE=smoke FEEDLAB_STRICT_FIGURES=1 $(PY) -m pytest -q --nbval-lax --nbval-current-env $(NB) tests/notebooks

browser-check: $(STAMP) ## open every executed notebook in JupyterLab in headless Chromium: figures render, no error shows
	$(PY) tests/browser_check.py

lock: $(STAMP) ## rewrite constraints.txt from .venv (after a deliberate upgrade; commit it with the figures it made)
	@{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^-e\|^pip==\|^setuptools==\|^wheel==\|^feedlab'; } > constraints.txt.new && mv constraints.txt.new constraints.txt

pillow-simd: ## build .venv-simd with Pillow-SIMD (needs root for apt) so notebook 06 compares it with Pillow
	command -v apt-get >/dev/null && apt-get install -y -q libjpeg62-turbo-dev zlib1g-dev >/dev/null || true
	@test -x .venv-simd/bin/python || $(PYTHON) -m venv .venv-simd
	.venv-simd/bin/pip install -q numpy
	CC="cc -mavx2" .venv-simd/bin/pip install -q --no-binary :all: pillow-simd

# Lab opens at the repository root: notebooks/ to run, figures/<notebook>/ for the executed
# notebooks with their results. Its "Python 3" kernel is this venv's Python, the one the
# runner uses. Containers and cloud GPU images run as root, which Lab refuses without a flag.
lab: $(STAMP) ## start JupyterLab at the repository root (notebooks/ to run, figures/ for results)
	$(VENV)/bin/jupyter lab --notebook-dir="$(CURDIR)" $$([ "$$(id -u)" = 0 ] && echo --allow-root)

doctor: data ## build the embedded data if missing, then ask the bottleneck doctor about its PNG set
	$(PY) -m feedlab.doctor --data $$($(PY) -c 'from feedlab.paths import default_sr_root; print(default_sr_root("$(PROFILE)"))') --format png

clean-data: ## remove data/ (built sets; rebuilt on demand)
	rm -rf data

.PHONY: help install peers ray data figures test test-slow nbval browser-check lab doctor clean-data pillow-simd lock
