# Two commands do everything on a fresh machine:
#   make demo   - convert the embedded default (a tiny trained Qwen3.5 + MTP head) and run it with llama.cpp
#   make test   - the test suite (what CI runs)
#   make test-fast - the tests marked fast, which need no llama.cpp (about 2 min, before the llama.cpp build; CI
#                    runs it first)
#   make lint   - ruff (style, import order, unused noqa) and mypy (types, unneeded type: ignore) on gguf_mtp, cli
#                 and bench
VENV ?= .venv
STAMP := $(VENV)/.gguf-mtp-installed

.PHONY: setup demo test test-fast lint bench clean
setup: $(STAMP)
$(STAMP): pyproject.toml scripts/setup.sh $(wildcard patches/llama.cpp/*.patch)
	bash scripts/setup.sh

TINY := out/tiny-qwen35-mtp-BF16.gguf
demo: $(STAMP)
	mkdir -p $(dir $(TINY))
	$(VENV)/bin/gguf-mtp convert examples/tiny-qwen35-mtp --outfile $(TINY) --force
	$(VENV)/bin/gguf-mtp run $(TINY) -f examples/prompt.txt -n 96
	$(VENV)/bin/python examples/quickstart.py out/demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

FAST_VENV := .venv-fast
$(FAST_VENV)/.gguf-mtp-installed: pyproject.toml scripts/setup-fast.sh
	VENV=$(FAST_VENV) bash scripts/setup-fast.sh
	touch $@

test-fast: $(FAST_VENV)/.gguf-mtp-installed
	$(FAST_VENV)/bin/python -m pytest -q -p no:cacheprovider -m fast

lint: $(STAMP)
	$(VENV)/bin/ruff check gguf_mtp cli bench
	$(VENV)/bin/mypy gguf_mtp cli bench

bench: $(STAMP)
	$(VENV)/bin/python -m bench.convert

clean:
	rm -rf out build *.egg-info .pytest_cache .ruff_cache .mypy_cache $(FAST_VENV)
