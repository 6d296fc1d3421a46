# The two commands: `make demo` and `make test`. Each sets itself up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# One virtualenv; each target installs only the extra it needs (the demo's is a fraction of the tests').
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed-test
# `make demo DEMO_ARGS="--port 9500 --time-scale 0.1"` passes flags to `streamscope demo`.
DEMO_ARGS ?=

.PHONY: demo test lint bench dashboards prometheus chromium redis screenshots clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The compiled reader is built by the install (in place, beside its source): a changed source installs again.
READER_C := instrumentation/streamscope/adapters/stainless/_reader.c

$(DEMO_STAMP): pyproject.toml $(READER_C) | $(VENV)/bin/python
	$(PY) -m pip install --quiet --upgrade -e '.[demo]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml $(READER_C) | $(VENV)/bin/python
	$(PY) -m pip install --quiet --upgrade -e '.[test]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/streamscope demo $(DEMO_ARGS)

prometheus:
	bash scripts/ensure-prometheus

chromium:
	bash scripts/ensure-chromium
	bash scripts/ensure-typescript

redis:
	bash scripts/ensure-redis

# The checks, before the tests so that a finding fails fast (docs/checks.md): ruff, mypy (the
# package, strict) and the import contracts, all configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Six workers on two cores: most tests wait on timers, servers and child processes, not the CPU.
# Each module stays in one worker (its servers are module-scoped); tests/conftest.py orders the longest
# first and splits the SDK-line matrix. `PYTEST_WORKERS=0` runs them in this process.
PYTEST_WORKERS ?= 6
test: $(STAMP) lint prometheus chromium redis
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# Benchmarks get a virtualenv of their own: the peers they compare against register
# opentelemetry-instrument entry points too, which must not turn on in the tests' environment.
BENCH_VENV ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
PEERS := opentelemetry-instrumentation-anthropic openinference-instrumentation-anthropic \
	opentelemetry-instrumentation-genai-anthropic opentelemetry-instrumentation-openai-v2 logfire ddtrace

$(BENCH_STAMP): pyproject.toml $(READER_C)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade -e '.[test,lab]'
	for peer in $(PEERS); do $(BENCH_VENV)/bin/python -m pip install --quiet --upgrade $$peer \
		|| echo "$$peer does not install here: not measured"; done
	# openai-v2 apart, with the util-genai it imports (1.1b0; the Anthropic peer needs 1.3b0) and httpx
	# (which openai 3.x no longer brings): benchmarks/instructions.py puts it on the path of its children.
	$(BENCH_VENV)/bin/python -m pip install --quiet --no-deps --upgrade --target $(BENCH_VENV)/openai-v2 \
		opentelemetry-instrumentation-openai-v2 opentelemetry-util-genai==1.1b0 httpx httpcore \
		|| echo "openai-v2 does not install here: not measured"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	cd benchmarks && ../$(BENCH_VENV)/bin/python run.py

dashboards: $(STAMP)
	$(PY) dashboards/generate.py

screenshots: $(STAMP) prometheus chromium
	$(PY) dashboards/render.py --live -o docs/img

clean:
	rm -f instrumentation/streamscope/adapters/stainless/_reader.*.so
	rm -rf $(VENV) $(BENCH_VENV) .venv-anthropic-only .venv-openai-only .venv-anthropic-floor-only .venv-lines .venv-frameworks .pytest_cache .hypothesis .mypy_cache .ruff_cache .import_linter_cache
