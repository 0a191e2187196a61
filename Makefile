# Two commands do everything on a fresh machine:
#   make demo   - convert the embedded default checkpoint, inspect it, load and run it with llama.cpp
#   make test   - the test suite (what CI runs)
VENV ?= .venv
STAMP := $(VENV)/.gguf-mtp-installed

.PHONY: setup demo test bench clean
setup: $(STAMP)
$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

demo: $(STAMP)
	$(VENV)/bin/python examples/quickstart.py

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/python bench/convert.py

clean:
	rm -rf out build *.egg-info .pytest_cache
