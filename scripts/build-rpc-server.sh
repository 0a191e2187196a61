#!/usr/bin/env bash
# Builds llama.cpp's rpc-server (CMake target ggml-rpc-server) from the llama.cpp that llama-cpp-python
# 0.3.36 vendors, i.e. the same ggml and RPC protocol as `gguf-mtp run --rpc`. A static binary, for a
# machine that should lend its devices without Python (otherwise `gguf-mtp rpc-server` serves the same).
#   bash scripts/build-rpc-server.sh [OUT_DIR]                         # CPU (default OUT_DIR: build/rpc-server)
#   CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/build-rpc-server.sh       # the devices to serve are CUDA GPUs
# env: LLAMA_CPP_SDIST (an unpacked llama_cpp_python-0.3.36 folder; default: pip downloads the sdist),
#      CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build/rpc-server}"
VERSION="0.3.36"
SRC="${LLAMA_CPP_SDIST:-}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
if [ -z "$SRC" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$TMP/sdist"
    tar xzf "$TMP"/sdist/llama_cpp_python-"$VERSION".tar.gz -C "$TMP"
    SRC="$TMP/llama_cpp_python-$VERSION"
fi
[ -f "$SRC/vendor/llama.cpp/tools/rpc/rpc-server.cpp" ] ||
    { echo "build-rpc-server: error: $SRC/vendor/llama.cpp/tools/rpc/rpc-server.cpp not found; set LLAMA_CPP_SDIST to an unpacked llama_cpp_python-$VERSION" >&2; exit 1; }
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of words
cmake -S "$SRC/vendor/llama.cpp" -B "$TMP/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_RPC=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF ${CMAKE_ARGS:-} > "$TMP/configure.log" 2>&1 ||
    { tail -20 "$TMP/configure.log" >&2; echo "build-rpc-server: error: CMake configure failed" >&2; exit 1; }
cmake --build "$TMP/build" --target ggml-rpc-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
mkdir -p "$OUT"
cp "$TMP/build/bin/ggml-rpc-server" "$OUT/rpc-server.partial" && mv "$OUT/rpc-server.partial" "$OUT/rpc-server"
echo "build-rpc-server: $OUT/rpc-server (run it with --host <trusted address> --port 50052)" >&2
