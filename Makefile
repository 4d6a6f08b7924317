# Local shortcuts for the gates .ci/run runs (install the tools with: pip install -e '.[dev]').
PYTHON ?= python3

.PHONY: lint type test generate check

lint:
	ruff check .
	ruff format --check .

type:
	mypy

test:
	$(PYTHON) -m pytest --ignore=tests/e2e

generate:
	$(PYTHON) -m kvoffload_exporter bundle --out .

check: lint type test
	$(PYTHON) -m kvoffload_exporter bundle --out . --check
