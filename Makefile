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
# pyproject.toml's [build-system] requirements go into .venv first, so the editable installs
# build without an isolated environment and the compiled core rebuilds from .venv, offline.
BUILD_REQUIRES := 'setuptools>=77' 'Cython>=3.0'
EDITABLE := TRIOLOG_PURE_PYTHON=1 $(PIP) --no-build-isolation -e
# (a .venv made by an older Makefile may lack them: the core's build checks first)
export BUILD_TOOLS_PRESENT := import Cython, setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)

# The compiled core (triolog/core.py's MODULES, each compiled by setup.py into an extension
# beside its source): rebuilt in place when a module's source, core.py, setup.py or the install
# changed, so a stale extension never runs. Silent unless it cannot compile (then it says so once
# and the pure-Python modules run). The editable install itself leaves the compilation to this
# step (TRIOLOG_PURE_PYTHON at install time), so it happens once.
CORE_STAMP := $(VENV)/.triolog-core
CORE_SOURCES := $(shell sed -n '/^MODULES = (/,/^)/s/^ *"\([A-Za-z0-9_.]*\)",.*/\1/p' triolog/core.py | tr . / | sed 's/$$/.py/')
# and the C declarations compiled with them (_<module>_c.pxd beside a source), where one exists
CORE_DECLARATIONS := $(wildcard $(foreach source,$(CORE_SOURCES),$(dir $(source))_$(basename $(notdir $(source)))_c.pxd))

# The tests of the compiled modules themselves (triolog/core.py's MODULES: the record codec, the
# accumulator, the partitioner, the cleaner's core), run a second time on the pure-Python core
# (TRIOLOG_PURE_PYTHON is read at import, so that takes a second process). Not repeated there:
# the end-to-end tests that reach the core through a broker or a client (tests/client's broker
# tests, the cleaner's threads, worker process and swap faults), which the first pass ran; the
# compiled and pure cores give the same bytes, which the codec tests check directly. Nor the
# protocol tests of modules that never call the core (the msgpack messages and their request
# budget, frames, compression, .properties, the protocol reference): the same code twice.
# `make test PYTEST_ARGS=...` runs only the first pass.
PURE_TESTS := tests/protocol/test_records.py tests/protocol/test_record_batch.py tests/protocol/test_codec_core.py \
	tests/protocol/test_core.py tests/protocol/test_kafka_python_crosscheck.py \
	tests/client/test_accumulator.py tests/client/test_partitioner.py tests/client/test_consumer_protocol.py \
	tests/storage/cleaner/test_cleaner_core.py tests/storage/cleaner/test_offset_map.py tests/storage/cleaner/test_selection.py \
	tests/storage/cleaner/test_compaction.py tests/storage/cleaner/test_transactions.py \
	tests/storage/cleaner/test_cleaner_producers.py tests/storage/cleaner/test_crash_recovery.py \
	tests/storage/test_validator.py tests/pipeline/test_columnar.py

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) $(BUILD_REQUIRES)
	$(EDITABLE) .
	touch $@

$(TEST_STAMP): pyproject.toml $(RUNTIME_STAMP)
	$(EDITABLE) '.[test,spark]'
	touch $@

# The C compiler the core was last built with (make's CC: cc unless given), named in a file: another
# one, e.g. `make test` after `CC=false make test`, has no file yet, so the core is rebuilt with it.
EMPTY :=
CC_RECORD := $(VENV)/.triolog-cc-$(subst /,_,$(subst $(EMPTY) $(EMPTY),_,$(CC)))
$(CC_RECORD): | $(BIN)/python
	@rm -f $(VENV)/.triolog-cc-*
	@touch $@

$(CORE_STAMP): setup.py triolog/core.py $(CORE_SOURCES) $(CORE_DECLARATIONS) $(RUNTIME_STAMP) $(CC_RECORD)
	@$(BIN)/python -c "$$BUILD_TOOLS_PRESENT" 2>/dev/null || $(PIP) $(BUILD_REQUIRES)
	@$(BIN)/python setup.py -q build_ext --inplace
	@touch $@

install: $(RUNTIME_STAMP) $(CORE_STAMP)

run: $(RUNTIME_STAMP) $(CORE_STAMP)
	$(BIN)/triolog serve

# Most tests run the broker and the CLI in-process (triolog.testing); those of the process itself
# (kill -9, signals, exit codes, rlimits, the image) still start dozens. Where
# PYTHONDONTWRITEBYTECODE is set (CI machines often set it) each would compile triolog from source,
# about 1 s a process: the test run keeps bytecode in .venv/pycache instead, never in the checkout
# (an empty PYTHONDONTWRITEBYTECODE counts as unset).
test: export PYTHONDONTWRITEBYTECODE :=
test: export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache

# The suite often waits (on broker processes, timeouts, Spark's JVM: run serially it kept 0.7 of
# two cores busy), so it runs in TEST_WORKERS processes (pytest-xdist), each taking a whole test
# file at a time, since a file's tests share its module's broker; tests/scheduling.py makes
# tests/pipeline one unit (one Spark) and hands out the longest units first. Serially 1296 s;
# with three workers and the pure-Python pass beside them, about 575 s on this project's two-core
# machine (11 minutes for the whole fresh-clone run). PYTEST_ARGS (one test while working) runs
# serially. (Not --dist loadgroup: under pytest 9 its groups are silently ignored, since
# pytest-xdist 3.8 renames a test's node id in a way pytest no longer reads, and every test
# becomes a unit of its own, sharing no module's broker.)
TEST_WORKERS ?= 3
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

# system-deps first: the compiled core is built (CORE_STAMP) with the C compiler it provides. The
# whole run starts with `lint` (half a minute); PYTEST_ARGS runs only the tests named.
# What the tests need is made two at a time (-j2): the compiled core builds while pip installs
# the test tools and then while lint runs, instead of after them (a minute less on two cores);
# each step's output is printed whole when it ends (-O).
test: system-deps
	@$(MAKE) --no-print-directory -j2 -O $(TEST_STAMP) $(CORE_STAMP) $(if $(PYTEST_ARGS),,lint)
	$(if $(PYTEST_ARGS),$(BIN)/python -m pytest -q $(PYTEST_ARGS),$(BOTH_PASSES))

# The pure-Python pass runs beside the first, in one process at low priority (nice): it takes the
# CPU the first pass leaves idle while its tests wait on brokers, timeouts and Spark (a third of
# two cores), instead of a minute and a half after it. Its output goes to PURE_LOG, printed when
# both have ended; the run fails if either does.
PURE_LOG := $(VENV)/pure-pass.log
define BOTH_PASSES
TRIOLOG_PURE_PYTHON=1 nice -n 10 $(BIN)/python -m pytest -q -p no:cacheprovider $(PURE_TESTS) >$(PURE_LOG) 2>&1 & \
	pure=$$!; trap 'kill $$pure 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest -q $(PARALLEL); first=$$?; \
	wait $$pure; second=$$?; \
	echo "The pure-Python pass (TRIOLOG_PURE_PYTHON=1, $(PURE_LOG)):"; cat $(PURE_LOG); \
	[ $$first = 0 ] && [ $$second = 0 ]
endef

# Debian packages the tests run: prometheus (its server and promtool) and tini (the image's
# PID 1) for tests/ops, kcat (librdkafka's command-line client) against the Kafka listener,
# ZooKeeper's jars (libzookeeper-java: tests/cluster runs an ensemble by hand, no service), a
# Java 17+ runtime for PySpark 4 in tests/pipeline and for ZooKeeper (17, or 21 where the
# release no longer ships 17), and a C compiler with Python's headers for the compiled core (the
# suite checks it runs where a compiler exists; the pure-Python pass covers the fallback). A CC
# given to make is the user's choice and never replaced: `CC=false make test` runs everything as
# on a machine without a compiler (the core falls back to pure Python, the tests check that).
# Installed only when missing; sudo is used when not root. The prometheus package's postinst may
# start a daemon on :9090; the tests run their own instance on a free port.
CC_CHOSEN := $(filter-out default,$(origin CC))
system-deps:
	@JAVA_OK=$$(java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])' && echo yes); \
	CC_OK=$$( { [ -n "$(CC_CHOSEN)" ] || printf 'int triolog_probe;\n' | cc -x c -c -o /dev/null - 2>/dev/null; } && echo yes); \
	HEADERS_OK=$$(test -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" && echo yes); \
	command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v tini >/dev/null \
		&& command -v kcat >/dev/null && [ -f /usr/share/java/zookeeper.jar ] \
		&& [ -n "$$JAVA_OK" ] && [ -n "$$CC_OK" ] && [ -n "$$HEADERS_OK" ] || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus tini kcat libzookeeper-java \
			$$([ -n "$$CC_OK" ] || echo gcc libc6-dev) $$([ -n "$$HEADERS_OK" ] || echo python3-dev) \
			$$([ -n "$$JAVA_OK" ] || { apt-cache show openjdk-17-jre-headless >/dev/null 2>&1 \
				&& echo openjdk-17-jre-headless || echo openjdk-21-jre-headless; }) >/dev/null; }

bench: $(TEST_STAMP) $(CORE_STAMP)
	$(BIN)/python bench/storage.py

# A 3-broker cluster on this machine (README's "Run a 3-broker cluster"): a 3-node ZooKeeper
# ensemble and three `triolog serve` processes on 127.0.0.1, data and logs in CLUSTER_DIR, until
# Ctrl-C. No Docker, but Java 17+ and Debian's libzookeeper-java, which system-deps installs (not
# run from here: it would install the test tools too, with sudo; the command says what is missing).
# CLUSTER_ARGS: more options (python -m triolog.devcluster --help), e.g. CLUSTER_ARGS=--free-ports.
CLUSTER_DIR ?= cluster-data
.PHONY: cluster
cluster: $(RUNTIME_STAMP) $(CORE_STAMP)
	$(BIN)/python -m triolog.devcluster --dir $(CLUSTER_DIR) $(CLUSTER_ARGS)

# Static checks, configured in pyproject.toml, run first by `make test`: ruff's lint rules and its
# formatter (check only) on the product code, mypy, and the import-layer contracts (lint-imports:
# also run by tests/test_architecture.py).
.PHONY: lint
LINT_PATHS := broker client config devcluster pipeline protocol triolog pyspark_triolog.py setup.py
lint: $(TEST_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
