# Every target creates or reuses .venv and installs the package into it: no separate set-up step.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Airflow lives in its own venv (tests/test_airflow_dag.py runs the example DAG with it): it must not enter .venv.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
# PyTorch lives in its own venv layered on .venv (a .pth file adds .venv's packages): ~900 MB,
# kept out of .venv. `make test` builds it (~25 s from the CPU wheel pip finds on this machine's
# disk, torch==2.13.0) and, when it runs the whole suite (no ARGS), runs tests/test_torch.py
# and the README's PyTorch block with it (docs/reading.md); `make test-torch` runs only those.
TORCH_VENV ?= .venv-torch
TORCH_STAMP := $(TORCH_VENV)/.installed
TORCH_TESTS := tests/test_torch.py tests/test_reading_elsewhere.py::test_pytorch_block \
  tests/test_reading_elsewhere.py::test_many_hosts_random_access_block \
  tests/test_split_slicing.py::test_torch_dataset_takes_slices tests/test_many_hosts.py::test_torch_dataset_shard

.PHONY: run test test-fast test-torch bench lint clean

# The venvs a target needs are built side by side (.venv and .venv-airflow on a fresh clone);
# pip is --quiet, so their lines do not interleave.
MAKEFLAGS += -j3

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(AIRFLOW_STAMP): examples/airflow/requirements.txt
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	echo '*' > $(AIRFLOW_VENV)/.gitignore
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet -r examples/airflow/requirements.txt
	touch $(AIRFLOW_STAMP)

$(TORCH_STAMP): $(STAMP)
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	echo '*' > $(TORCH_VENV)/.gitignore
	$(TORCH_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(PY) -c "import site; print(f'import site; site.addsitedir({site.getsitepackages()[0]!r})')" \
	  > "$$($(TORCH_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/_etl_venv.pth"
	touch $(TORCH_STAMP)

# compileall: what pip does when it installs a package; a machine with PYTHONDONTWRITEBYTECODE
# set would compile our modules on every run (benchmarks/bytecode.py). Up to date: ~0.04 s.
run: $(STAMP)
	$(PY) -m compileall -q cli etl transforms >/dev/null
	$(PY) run_pipeline.py $(ARGS)

# The suite runs in TEST_WORKERS pytest-xdist processes (2 on the 2-core CI machine): a test goes
# to whichever is free, except the groups tests/conftest.py forms (a file whose tests share a
# module-scoped fixture; the tests that time themselves, one at a time); larger groups start first.
TEST_WORKERS ?= 2
test: $(STAMP) $(AIRFLOW_STAMP) $(TORCH_STAMP)
	ETL_AIRFLOW_PYTHON=$(abspath $(AIRFLOW_VENV))/bin/python $(PY) -m pytest -q -n $(TEST_WORKERS) \
	  --dist loadgroup --durations=25 $(ARGS)
	$(if $(ARGS),,$(TORCH_VENV)/bin/python -m pytest -q $(TORCH_TESTS))

# The quick tier: no test marked `slow` (those start our CLI, a server or another venv, or run a
# Beam pipeline; pyproject.toml's markers, tests/conftest.py), in TEST_WORKERS processes too:
# under 1 minute on the 2-core CI machine.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" $(ARGS)

test-torch: $(TORCH_STAMP)
	$(TORCH_VENV)/bin/python -m pytest -q $(TORCH_TESTS) $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.run $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) $(TORCH_VENV) out build *.egg-info
