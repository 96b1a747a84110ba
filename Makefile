# The two commands a newcomer needs: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,spark]'

run: install
	$(BIN)/triolog serve

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/storage.py
