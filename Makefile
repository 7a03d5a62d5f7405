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

# the suite in TEST_WORKERS processes (pytest-xdist; CI has 2 cores); TEST_WORKERS=0 runs it in
# this process alone
TEST_WORKERS ?= 2

test: setup
	$(VPY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench:
	$(VPY) benchmarks/bench_sim.py

# The main job: DL2's recipe, train.py +agent=a2c with its defaults (conf/agent/a2c.yaml), on
# DL2's small setting with DL2's bundle backlog, under 2 min: one action per slot picks the
# allocator that plans it (dlsched/ClusterPlan-v0 over Cluster-v0); clone EfficientSRTF's plan,
# then 40 iterations of the actor-critic (critic, job-aware exploration, replay) on the JCT
# reward; the final table holds every registered heuristic.
demo: setup
	$(VPY) train.py +agent=a2c

evaluate: setup
	$(VPY) evaluate.py
