# kb — make targets. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kb-installed

.PHONY: install check test demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,local]'
	touch $(STAMP)

install: $(STAMP)

check: $(STAMP)
	$(VENV)/bin/ruff check kb tests bench
	$(VENV)/bin/ruff format --check kb tests bench
	$(VENV)/bin/mypy kb

test: check
	$(VENV)/bin/pytest -q

demo: $(STAMP)
	@echo "make demo arrives with kb sweep (issue 4): it will run sweeps/demo.toml on the bundled SmolLM2 model."

bench: $(STAMP)
	$(PY) bench/store_bench.py
	$(PY) bench/engine_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
