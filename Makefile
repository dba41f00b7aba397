# Every target creates or reuses .venv and installs the package into it: no separate set-up step.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Airflow lives in its own venv (tests/test_airflow_dag.py runs the example DAG with it): it must not enter .venv.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

.PHONY: run test bench lint clean

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

run: $(STAMP)
	$(PY) run_pipeline.py $(ARGS)

test: $(STAMP) $(AIRFLOW_STAMP)
	ETL_AIRFLOW_PYTHON=$(abspath $(AIRFLOW_VENV))/bin/python $(PY) -m pytest -q $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.run $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) out build *.egg-info
