# feedlab: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
STAMP := $(VENV)/.feedlab-installed

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev,fast]'
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install feedlab with its dev and fast-path extras

data: $(STAMP) ## build the embedded data sets for PROFILE (default quick) and pack every format
	$(PY) -m feedlab.run --data-only --profile $(PROFILE)

figures: $(STAMP) ## prepare data and run every notebook (PROFILE=quick|full|smoke), writing figures/ and the README's figure section
	$(PY) -m feedlab.run --profile $(PROFILE)
	@if [ "$(PROFILE)" != smoke ]; then $(PY) -m feedlab.readme; fi

test: $(STAMP) ## run the test suite, nbval over every notebook with the smoke profile included
	FEEDLAB_PROFILE=smoke $(PY) -m pytest -q tests
	FEEDLAB_PROFILE=smoke FEEDLAB_STRICT_FIGURES=1 $(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider notebooks

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

doctor: $(STAMP) ## ask the bottleneck doctor about the embedded PNG set
	$(PY) -m feedlab.doctor --data data/sr64 --format png

clean-data: ## remove data/ (built sets; rebuilt on demand)
	rm -rf data

.PHONY: help install data figures test lab doctor clean-data pillow-simd
