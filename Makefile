# The two commands: `make demo` and `make test`. Each sets itself up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench dashboards prometheus clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --upgrade -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/streamscope demo

prometheus:
	bash scripts/ensure-prometheus

test: $(STAMP) prometheus
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/run.py

dashboards: $(STAMP)
	$(PY) dashboards/generate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
