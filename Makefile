# The two commands a newcomer needs: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench install system-deps

# pip runs only when pyproject.toml changed since the last install (the stamp files), so both
# commands work offline once installed. `make run` installs the broker's runtime dependencies
# only; `make test` adds the test tools and PySpark. -qq: errors only (setuptools otherwise
# prints an informational banner about editable installs on every install).
RUNTIME_STAMP := $(VENV)/.triolog-runtime
TEST_STAMP := $(VENV)/.triolog-test
PIP := $(BIN)/pip install -qq --disable-pip-version-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test,spark]'
	touch $@ $(RUNTIME_STAMP)

install: $(RUNTIME_STAMP)

run: $(RUNTIME_STAMP)
	$(BIN)/triolog serve

test: $(TEST_STAMP) system-deps
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Debian packages the tests run: prometheus (its server and promtool) and tini (the image's
# PID 1) for tests/ops, a Java 17+ runtime for PySpark 4 in tests/pipeline (17, or 21 where the
# release no longer ships 17). Installed only when missing; sudo is used when not root. The prometheus package's postinst may start a daemon
# on :9090; the tests run their own instance on a free port.
system-deps:
	@JAVA_OK=$$(java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])' && echo yes); \
	command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v tini >/dev/null \
		&& [ -n "$$JAVA_OK" ] || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus tini \
			$$([ -n "$$JAVA_OK" ] || { apt-cache show openjdk-17-jre-headless >/dev/null 2>&1 \
				&& echo openjdk-17-jre-headless || echo openjdk-21-jre-headless; }) >/dev/null; }

bench: $(TEST_STAMP)
	$(BIN)/python bench/storage.py
