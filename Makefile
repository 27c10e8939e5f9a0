# Two commands on a fresh machine: `make dev` (UI + daemon on the shipped raw) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export ATLASMART_AS_OF ?= 2026-09-22
export DAGSTER_HOME ?= $(CURDIR)/var/dagster_home

$(BIN)/dagster: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

.PHONY: setup dev browser test test-fast lab bench
setup: $(BIN)/dagster

dev: setup
	mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml

# The browser test drives Debian's chromium (never a Playwright download); CI runs as root on a fresh clone.
browser:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: setup browser
	$(BIN)/python -m pytest -q

# The inner loop: every test but the deployment and browser ones (marked integration), on both cores.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not integration" -n 2 --dist loadgroup

lab: setup
	$(BIN)/atlasmart lab

bench: setup
	$(BIN)/python -m bench.run
