# The two commands a new user runs: `make demo` and `make test`. Each sets up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.guided-installed
PYTEST_ARGS ?=

.PHONY: setup demo test lint bench-regex clean-cache

$(STAMP): pyproject.toml scripts/setup_env.sh
	VENV=$(VENV) bash scripts/setup_env.sh
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m guided demo

# pytest exits 5 when it collected no test; that is not a failure of the suite.
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

lint: $(STAMP)
	$(PY) -m ruff check guided grammar engine kernels tests benchmarks

clean-cache:
	rm -rf $${GUIDED_CACHE:-$$HOME/.cache/guided}
