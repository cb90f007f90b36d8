# zkcoord developer and user commands. `make demo` and `make test` are the
# two set-up commands of the README; both install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ZKC    := $(VENV)/bin/zkcoord
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv jars test unit integration demo down faults bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "zkcoord needs Python 3.11+, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

jars: venv
	$(ZKC) local fetch

# Unit, integration and bounded fault tests (about 20 faults, a printed seed), on TEST_WORKERS
# processes (pytest-xdist; each module on one, each process with its own sandbox; 0: one process);
# the fixtures start private sandboxes and stop them; the 25 slowest steps are listed at the end.
# The longest modules are named first so that they start first.
TEST_WORKERS ?= 2
test: jars
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests/faults tests/integration tests/unit -ra --durations=25 $(PYTEST_ARGS)

unit: venv
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

integration: jars
	$(PY) -m pytest tests/integration -ra $(PYTEST_ARGS)

# A long fault run by hand: FAULTS faults (ZKCOORD_FAULT_SEED=<seed> replays one).
FAULTS ?= 200
faults: jars
	ZKCOORD_FAULTS=$(FAULTS) $(PY) -m pytest tests/faults -s -ra $(PYTEST_ARGS)

# The main job on the local sandbox (left running; `make down` stops it).
demo: jars
	bash scripts/demo.sh

down: venv
	$(ZKC) local down

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
