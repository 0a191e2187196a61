#!/usr/bin/env bash
# Creates .venv with gguf-mtp (editable) and a llama-cpp-python built from source.
# The wheel build (~5 min on 2 cores) is cached per version and CMAKE_ARGS in
# $GGUF_MTP_WHEEL_CACHE (default ~/.cache/gguf-mtp/wheels), so later runs install in seconds.
#   CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/setup.sh      # CUDA build
#   CMAKE_ARGS="-DGGML_VULKAN=on" bash scripts/setup.sh    # Vulkan build
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
PY="${PYTHON:-python3}"
CACHE="${GGUF_MTP_WHEEL_CACHE:-$HOME/.cache/gguf-mtp/wheels}"
TAG="$(printf '%s|%s' "$LLAMA_CPP_PYTHON_VERSION" "${CMAKE_ARGS:-}" | sha1sum | cut -c1-12)"
WHEEL_DIR="$CACHE/$TAG"

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

if ! ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (CMAKE_ARGS='${CMAKE_ARGS:-}'); ~5 min, cached in $WHEEL_DIR" >&2
    mkdir -p "$WHEEL_DIR.partial"
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$VENV/bin/python" -m pip wheel --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -w "$WHEEL_DIR.partial"
    rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.partial" "$WHEEL_DIR"
fi
"$VENV/bin/python" -m pip install -q "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl
"$VENV/bin/python" -m pip install -q -e ".[test]"
touch "$VENV/.gguf-mtp-installed"
echo "setup: ready ($VENV)" >&2
