#!/usr/bin/env bash
# libllama alone, for the upstream proposal docs/upstream/qwen3next-rs-rollback.md: build it from the llama.cpp
# that llama-cpp-python 0.3.36 vendors with patches/llama.cpp/0001-qwen3next-rs-rollback.patch (the patch
# scripts/setup.sh ships in the wheel), and run gguf-mtp's qwen3next tests against it through LLAMA_CPP_LIB_PATH.
# gguf-mtp must then pick native rollback (n_rs_seq snapshots) by itself, and output must still equal plain
# decoding. Nothing here is installed: the build lives in $WORK, the venv's llama-cpp-python is untouched.
#
#   bash scripts/upstream-qwen3next-rollback.sh            # ~5-8 min on 2 cores (libllama + ggml, CPU only)
#   SRC=/path/to/llama_cpp_python-0.3.36 bash scripts/upstream-qwen3next-rollback.sh   # an unpacked sdist
#   WORK=/tmp/q3n-native JOBS=2 ...                          # where to build, how many compile jobs
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PY:-$ROOT/.venv/bin/python}"
WORK="${WORK:-/tmp/gguf-mtp-q3n-native}"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$WORK"
if [ -z "${SRC:-}" ]; then
    SRC="$WORK/llama_cpp_python-0.3.36"
    if [ ! -d "$SRC" ]; then
        "$PY" -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK/sdist"
        tar xzf "$WORK"/sdist/llama_cpp_python-0.3.36.tar.gz -C "$WORK"
    fi
fi
# a patched copy: the source it came from stays as it is
if [ ! -f "$WORK/llama.cpp/.patched" ]; then
    rm -rf "$WORK/llama.cpp"
    cp -r "$SRC/vendor/llama.cpp" "$WORK/llama.cpp"
    rm -rf "$WORK/llama.cpp/.git"  # a submodule pointer in some unpacked copies; the build only asks it for a version
    patch -d "$WORK/llama.cpp" -p1 < "$ROOT/patches/llama.cpp/0001-qwen3next-rs-rollback.patch"
    touch "$WORK/llama.cpp/.patched"
fi
if [ ! -f "$WORK/build/bin/libllama.so" ]; then
    cmake -S "$WORK/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF > "$WORK/cmake.log"
    time nice -n 19 cmake --build "$WORK/build" --target llama -j "$JOBS" > "$WORK/build.log"
fi
export LLAMA_CPP_LIB_PATH="$WORK/build/bin"
"$PY" - <<'EOF'
import os
import llama_cpp
print("libllama:", os.path.realpath(llama_cpp.llama_cpp._lib._name))
EOF
# the qwen3next tests: every one of them checks what rollback the runtime chose against what this libllama grants
"$PY" -m pytest tests/test_rollback.py -q -p no:cacheprovider "$@"
