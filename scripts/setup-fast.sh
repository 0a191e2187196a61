#!/usr/bin/env bash
# Creates .venv-fast: gguf-mtp (editable) and its dependencies except llama-cpp-python, for the fast test tier
# (`make test-fast`: the test modules marked fast, pytest -m fast: the converter, readers, writers and checks,
# before the llama.cpp build).
# env: VENV (default .venv-fast), PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-fast}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pyproject.toml's dependencies and test extra, less llama-cpp-python (one list: no copy of it here)
mapfile -t DEPS < <("$VENV/bin/python" - <<'PY'
import re, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
for d in p["dependencies"] + p["optional-dependencies"]["test"]:
    if not re.match(r"llama[-_]cpp[-_]python\b", d):
        print(d)
PY
)
"$VENV/bin/python" -m pip install -q "${DEPS[@]}"
"$VENV/bin/python" -m pip install -q --no-deps -e .
echo "setup-fast: ready ($VENV, no llama-cpp-python)" >&2
