# batchgate — the obvious targets. Everything runs from a project-local virtualenv (.venv),
# created on first use, so a fresh machine needs nothing but python3.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

SHELL := /bin/bash
.PHONY: setup lock test-newest serve test unit suites e2e e2e-deps lint typecheck bench bench-tools manifests readme clean

# Installs come from the lock (requirements/dev.txt: exact versions, sha256 hashes), never
# from whatever PyPI serves today; `make lock` refreshes it from pyproject.toml's ranges.
# The editable install of batchgate itself uses the locked setuptools (no build isolation, so
# nothing unlocked is fetched); setuptools' note on editable installs is informational.
$(STAMP): pyproject.toml requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/dev.txt
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/pip check --disable-pip-version-check >/dev/null
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with batchgate and its test tools, at the locked versions

lock:  ## refresh requirements/*.txt (exact versions and hashes) from pyproject.toml's ranges
	bash hack/lock.sh

NEWEST := .venv-newest
test-newest:  ## unit tests and suites on the newest versions pyproject.toml allows (not the lock)
	rm -rf $(NEWEST) && $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
	@$(NEWEST)/bin/python -m pytest tests/unit -q -p no:cacheprovider && $(NEWEST)/bin/batchgate test policies \
	  || { echo "test-newest: FAILED with the newest versions pyproject.toml allows, green with the lock:" \
	            "a dependency changed. What differs from requirements/dev.txt:" >&2; \
	       $(NEWEST)/bin/pip freeze --exclude-editable | diff <(grep -Eo '^[A-Za-z0-9_.-]+==[^ ;]+' requirements/dev.txt | tr 'A-Z_' 'a-z-' | sort) \
	            <(tr 'A-Z_' 'a-z-' | sort) | grep '^[<>]' >&2; exit 1; }

serve: $(STAMP)  ## run the webhook on the bundled policies (https://127.0.0.1:8443)
	$(BIN)/batchgate serve

test: lint unit suites e2e  ## everything CI runs

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

suites: $(STAMP)  ## the policy bundle's own suites, and drift of generated manifests and README parts
	$(BIN)/batchgate test policies
	$(BIN)/batchgate manifests --check
	$(BIN)/python hack/readme.py --check

# The Kubernetes the e2e suite runs on: 1.34 to 1.37 are supported (hack/kube/ pins each).
KUBE_VERSION ?= 1.37
export KUBE_VERSION

e2e: $(STAMP)  ## end-to-end against a real control plane, KUBE_VERSION=1.37 (skips without binaries unless CI=true)
	@if [ "$${CI:-}" = "true" ]; then bash hack/e2e-deps.sh; fi
	$(BIN)/python -m pytest tests/e2e -q

e2e-deps:  ## build the control plane for KUBE_VERSION from Go modules into the cache (minutes, once)
	bash hack/e2e-deps.sh

lint: $(STAMP)  ## ruff, mypy strict, and the import contracts of the layers (pyproject.toml)
	$(BIN)/ruff check webhook tests bench hack
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)  ## webhook throughput vs a no-op handler, the engine stage by stage, the reconciler planner, scavenger preemption
	$(BIN)/python bench/bench_webhook.py
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_planner.py
	$(BIN)/python bench/scavenger_sim.py

# What the benchmarks use beyond the lock (bench/README.md): wrk from Debian's packages (4.1.0 on
# Debian 12/13), and py-spy, pinned, for bench_peers.py --profile on the Python servers (the Go
# peers serve their own pprof). Neither is a dependency of batchgate or of its tests.
WRK_APT ?= wrk
PY_SPY  ?= py-spy==0.4.3
bench-tools: $(STAMP)  ## install wrk (apt) and py-spy (pip, pinned) for bench/
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq $(WRK_APT); }
	$(BIN)/pip install --quiet --disable-pip-version-check $(PY_SPY)
	@wrk --version 2>&1 | head -1; $(BIN)/py-spy --version

manifests: $(STAMP)  ## regenerate manifests/ parts derived from the bundle
	$(BIN)/batchgate manifests

readme: $(STAMP)  ## regenerate the README's generated parts (policy catalogue, the Job example)
	$(BIN)/python hack/readme.py

clean:
	rm -rf $(VENV) $(NEWEST) .pytest_cache .mypy_cache .ruff_cache *.egg-info
