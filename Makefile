# The two commands: `make demo` and `make test`. Each sets itself up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench dashboards prometheus screenshots clean

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

# Benchmarks get a virtualenv of their own: the peers they compare against register
# opentelemetry-instrument entry points too, which must not turn on in the tests' environment.
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
PEERS := opentelemetry-instrumentation-anthropic openinference-instrumentation-anthropic \
	opentelemetry-instrumentation-genai-anthropic

$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade -e '.[test]'
	for peer in $(PEERS); do $(BENCH_VENV)/bin/python -m pip install --quiet --upgrade $$peer \
		|| echo "$$peer does not install here: not measured"; done
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	cd benchmarks && ../$(BENCH_VENV)/bin/python run.py

dashboards: $(STAMP)
	$(PY) dashboards/generate.py

screenshots: $(STAMP) prometheus
	$(PY) dashboards/render.py --live -o docs/img

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .hypothesis
