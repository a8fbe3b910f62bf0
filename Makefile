# Two entry points: `make demo` (mixed pretraining on the bundled samples, then
# export) and `make test`. Both create .venv with pinned dependencies first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INTEROP_STAMP := $(VENV)/.interop
DEMO_DATA := experiments/demo/data
TORCH_VENV := .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed
JAX_VENV := .venv-jax
JAX_STAMP := $(JAX_VENV)/.installed
CURRENT_VENV := .venv-current
CURRENT_STAMP := $(CURRENT_VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install interop interop-torch interop-jax interop-current test test-slow demo bench clean

install: $(STAMP)

$(STAMP): requirements.txt setup.py
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# bert4keras 0.11.5 and keras-hub 0.32 for the parity tests and benchmarks.
# --no-deps on purpose (pip would backtrack bert4keras to 0.8.1); their tests skip if this fails.
interop: $(INTEROP_STAMP)

$(INTEROP_STAMP): $(STAMP) requirements-interop.txt
	$(BIN)/pip install -q --no-deps -r requirements-interop.txt \
	  || echo "interop packages not installed: bert4keras/keras-hub tests will skip"
	touch $(INTEROP_STAMP)

# torch (CPU) + JunnYu's roformer 0.4.3 in their own venv for the PyTorch parity tests
# (tests/test_roformer_pytorch.py); they skip if this fails. docs/pytorch.md.
interop-torch: $(TORCH_STAMP)

$(TORCH_STAMP): requirements-torch.txt
	test -d $(TORCH_VENV) || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q -r requirements-torch.txt \
	  || echo "torch packages not installed: PyTorch parity tests will skip"
	touch $(TORCH_STAMP)

# Today's torch / transformers 5 / sentence-transformers 6 (CPU) in their own venv: an
# export loaded as users load it now (tests/test_sentence_transformers.py runs its worker
# with .venv-current/bin/python); they skip if this fails. docs/export.md.
interop-current: $(CURRENT_STAMP)

$(CURRENT_STAMP): requirements-current.txt
	test -d $(CURRENT_VENV) || $(PYTHON) -m venv $(CURRENT_VENV)
	$(CURRENT_VENV)/bin/pip install -q -r requirements-current.txt \
	  || echo "current packages not installed: their sentence-transformers tests will skip"
	touch $(CURRENT_STAMP)

# JAX (CPU) + Keras + our runtime dependencies, WITHOUT TensorFlow, in their own venv: the
# KERAS_BACKEND=jax tests (tests/test_jax*.py) run their children with .venv-jax/bin/python;
# they skip if this fails. docs/backends.md.
interop-jax: $(JAX_STAMP)

$(JAX_STAMP): requirements-jax.txt setup.py
	test -d $(JAX_VENV) || $(PYTHON) -m venv $(JAX_VENV)
	( $(JAX_VENV)/bin/pip install -q -r requirements-jax.txt \
	  && $(JAX_VENV)/bin/pip install -q --no-deps -e . ) \
	  || echo "JAX packages not installed: the JAX backend tests will skip"
	@# keras-hub (its export format) as `make interop` pins it; --no-deps: no TensorFlow
	grep -E '^(keras-hub|regex)' requirements-interop.txt | xargs $(JAX_VENV)/bin/pip install -q --no-deps \
	  || echo "keras-hub not installed in $(JAX_VENV): its export on JAX will not be tested"
	touch $(JAX_STAMP)

# ruff (ruff.toml) first: line length, import order, unused names over the whole tree.
test: install interop interop-torch interop-jax interop-current
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15 tests

test-slow: install interop
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow tests

demo: install interop
	rm -rf runs/demo
	$(BIN)/mtl train experiments/demo.yaml --output runs/demo
	$(BIN)/mtl report runs/demo
	$(BIN)/mtl export runs/demo --format keras --with-heads --output runs/demo/export/keras
	$(BIN)/mtl export runs/demo --format bert4keras --output runs/demo/export/bert4keras
	$(BIN)/mtl export runs/demo --format keras-hub --output runs/demo/export/keras-hub
	$(BIN)/mtl export runs/demo --format roformer-pytorch --output runs/demo/export/roformer-pytorch
	@# The same initial weights without the training, what README's `mtl benchmark` compares with.
	$(BIN)/python -c "from mtl_framework.transfer.benchmark import initial_export; \
	  initial_export('runs/demo', 'runs/demo/export/initial')"
	@# What the model says about a few dev sentences (needs `mtl predict`).
	@if $(BIN)/mtl predict --help >/dev/null 2>&1; then \
	  mkdir -p runs/demo/predict && \
	  $(BIN)/mtl predict runs/demo --task tnews --input $(DEMO_DATA)/tnews/dev.json \
	    --output runs/demo/predict/tnews.jsonl && \
	  $(BIN)/mtl predict runs/demo --task chnsenticorp --input $(DEMO_DATA)/chnsenticorp/dev.tsv \
	    --output runs/demo/predict/chnsenticorp.jsonl && \
	  $(BIN)/mtl predict runs/demo --task cluener --input $(DEMO_DATA)/cluener/dev.json \
	    --output runs/demo/predict/cluener.jsonl && \
	  for task in tnews chnsenticorp cluener; do \
	    $(BIN)/python experiments/demo/show_predictions.py $$task runs/demo/predict/$$task.jsonl -n 4; \
	  done; \
	else echo "mtl predict is not in this version: no predictions shown"; fi
	@# The dev table README quotes (with date and machine): runs/demo/dev_scores.md + .json.
	$(BIN)/python experiments/demo/dev_table.py runs/demo
	@echo "dev scores: runs/demo/dev_scores.md (all evaluations: runs/demo/evaluations.jsonl); plots: runs/demo/plots/"

bench: install interop
	$(BIN)/python -m bench.backbone --output bench/results/backbone.json

clean:
	rm -rf $(VENV) $(TORCH_VENV) $(JAX_VENV) $(CURRENT_VENV) runs .pytest_cache
