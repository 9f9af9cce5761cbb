# Two entry points a new user needs: `make demo` and `make test`.
# Each creates .venv on first use and installs what it needs, offline-safe:
# the pinned CPU torch first, so nothing resolves the multi-GB CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.conceptgraph-installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[local,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

lint: $(STAMP)
	$(PY) -m ruff check shared_core llama_index_conceptgraph langchain_conceptgraph tests examples benchmarks
	$(PY) -m mypy

test: $(STAMP) lint
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
