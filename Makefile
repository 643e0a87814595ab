# Headwater: the two commands are `make run` and `make test`; both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: install run test lint protos descriptors bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install Headwater with its dev tools

run: $(STAMP) ## the whole pipeline on the embedded broker with a simulated fleet
	$(BIN)/headwater devstack run $(ARGS)

test: $(STAMP) ## the whole test suite against a real broker and a local Spark
	$(BIN)/pytest $(ARGS)

lint: $(STAMP) ## ruff, formatting, buf lint and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/buf lint
	$(BIN)/mypy services src/headwater

protos: $(STAMP) ## regenerate src/headwater/proto from proto/
	$(BIN)/python scripts/generate_protos.py

descriptors: $(STAMP) ## dist/headwater.binpb: the descriptor set, to decode every topic in any language
	mkdir -p dist
	$(BIN)/python -c "import sys; from headwater.contracts import descriptor_set; sys.stdout.buffer.write(descriptor_set())" > dist/headwater.binpb

bench: $(STAMP) ## the ingest benchmark (numbers go to docs/benchmarks.md)
	$(BIN)/headwater bench ingest $(ARGS)

clean:
	rm -rf $(VENV) .devstack .pytest_cache build *.egg-info
