# dlsched project tooling.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test lint bench demo evaluate

setup: $(STAMP)

# torch is installed FIRST from the local CPU wheel: anything that depends on torch
# installed before it would pull the multi-GB CUDA build.
$(STAMP): pyproject.toml setup.py envs/sim/_native.c envs/sim/elastic/_alloc_native.c
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install torch==2.13.0
	$(VPY) -m pip install -e '.[dev]'
	touch $(STAMP)

test: setup
	$(VPY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench:
	$(VPY) benchmarks/bench_sim.py

# The main job: the best recipe on DL2's small setting with DL2's bundle backlog, about 1.5 min:
# one action per slot picks the allocator that plans it (dlsched/ClusterPlan-v0); clone
# EfficientSRTF's plan, then 24 iterations of the episode policy gradient on the JCT reward.
demo: setup
	$(VPY) train.py +agent=plan_pg env=small env.backlog=bundle env.reward=jct pretrain=esrtf \
	    eval.deterministic=true agent.plan.val_every=2

evaluate: setup
	$(VPY) evaluate.py
