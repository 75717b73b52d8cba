# Two commands do everything: `make demo` and `make test`. Each sets itself up (idempotently).
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= demo-out

.PHONY: demo test test-slow setup setup-test doctor clean

setup:
	@scripts/bootstrap.sh

setup-test:
	@scripts/bootstrap.sh

demo: setup
	@$(PY) -m imagenet_shards.pipeline.tools.demo --out $(DEMO_OUT)

test: setup-test
	@$(PY) -m pytest $(PYTEST_ARGS)

test-slow: setup-test
	@$(PY) -m pytest -m slow $(PYTEST_ARGS)

doctor: setup
	@$(PY) -m imagenet_shards.pipeline.tools.doctor

clean:
	rm -rf $(DEMO_OUT) .pytest_cache
