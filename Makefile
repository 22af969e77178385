# Every target is self-contained on a fresh machine: it creates .venv and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-test.txt constraints-test.txt 2>/dev/null | cksum | cut -d' ' -f1)

.PHONY: demo test check fast lint typecheck bench bench-quick eval docs screenshots clean

$(STAMP): pyproject.toml requirements-test.txt constraints-test.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,server,postgres,testing,langchain,pydantic-ai,openai-agents,temporal,mcp,otel]' -r requirements-test.txt -c constraints-test.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

# issue 26 item 8: `make demo` installs only what the demo needs, amends and (for --serve) its web
# server, the `demo` extra: 57 MB and 23 packages; every other target installs everything (the
# extras, dev tools and test-only tools: 750 MB and 109 packages).
DEMO_STAMP := $(VENV)/.demo-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	rm -f $(VENV)/.demo-*
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/amends demo --db .amends-demo.db --html amends-demo-report.html

test: $(STAMP)
	bash scripts/test-deps.sh
	$(BIN)/python -m pytest -q
	bash scripts/test-newer-python.sh

fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard benchmarks)
	$(BIN)/ruff format --check src tests $(wildcard benchmarks)

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck fast

eval: $(STAMP)
	$(BIN)/amends eval --sagas 2000 --seed 1

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -r benchmarks/requirements.txt
	$(BIN)/python -m benchmarks

bench-quick: $(STAMP)
	$(BIN)/python -m pip install --quiet -r benchmarks/requirements.txt
	$(BIN)/python -m benchmarks --quick --out .bench/benchmarks-quick.md

docs: $(STAMP)
	$(BIN)/python -m pip install --quiet -r requirements-docs.txt -c constraints-test.txt
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The Undo screen at 375 and 1280 px, before / confirm / after, into docs/img (needs chromium).
screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

clean:
	rm -rf site $(VENV) .venv-py3.* .amends-demo.db* amends-demo-report.html .pytest_cache .mypy_cache .ruff_cache
