# Two commands do everything on a fresh machine:
#   make demo   - convert the embedded default (a tiny trained Qwen3.5 + MTP head) and run it with llama.cpp
#   make test   - the test suite (what CI runs)
VENV ?= .venv
STAMP := $(VENV)/.gguf-mtp-installed

.PHONY: setup demo test bench clean
setup: $(STAMP)
$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

TINY := out/tiny-qwen35-mtp-BF16.gguf
demo: $(STAMP)
	mkdir -p $(dir $(TINY))
	$(VENV)/bin/gguf-mtp convert examples/tiny-qwen35-mtp --outfile $(TINY) --force
	$(VENV)/bin/gguf-mtp run $(TINY) -f examples/prompt.txt -n 96 --spec-draft-n-max 3
	$(VENV)/bin/python examples/quickstart.py out/demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/python bench/convert.py

clean:
	rm -rf out build *.egg-info .pytest_cache
