# agentic-rl: `make test` and `make demo` are the two commands a fresh machine needs.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
VERL_VENV := .venv-verl
STAMP := $(VENV)/.installed
VERL_STAMP := $(VERL_VENV)/.installed

.PHONY: test lint demo bench install verl-venv clean

install: $(STAMP)

# A Python 3.12 found by tools/find_python.sh (PATH, pyenv, uv), then the package with its test extra.
$(STAMP): pyproject.toml tools/find_python.sh
	@py="$$(tools/find_python.sh 3.12)" && echo "using $$py" && "$$py" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

# The VERL parity environment: Python 3.11, CPU torch, verl 0.8.0 (see references/config_schema.md).
verl-venv: $(VERL_STAMP)
$(VERL_STAMP): tools/build_verl_venv.sh tools/verl-constraints.txt
	tools/build_verl_venv.sh $(VERL_VENV)

lint: $(STAMP)
	$(PY) -m ruff check scripts tests bench tools assets/generate_example.py
	$(VENV)/bin/shellcheck scripts/*.sh tools/*.sh .ci/run
	@rm -rf build/skill-lint && mkdir -p build/skill-lint/agentic-rl && cp SKILL.md build/skill-lint/agentic-rl/ \
	  && $(VENV)/bin/agentskills validate build/skill-lint/agentic-rl

test: $(STAMP) $(VERL_STAMP) lint
	$(PY) -m pytest -q

demo: $(STAMP)
	tools/demo.sh

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(VERL_VENV) build .pytest_cache .ruff_cache
