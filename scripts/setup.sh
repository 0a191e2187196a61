#!/usr/bin/env bash
# Creates .venv with gguf-mtp (editable) and a llama-cpp-python built from source.
# The wheel build (~5 min on 2 cores) is cached per version and CMAKE_ARGS in
# $GGUF_MTP_WHEEL_CACHE (default ~/.cache/gguf-mtp/wheels), so later runs install in seconds.
#   CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/setup.sh      # CUDA build
#   CMAKE_ARGS="-DGGML_VULKAN=on" bash scripts/setup.sh    # Vulkan build (needs libvulkan-dev, glslc;
#                                                          # headers < 1.3.272 get scripts/vulkan-compat)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
PY="${PYTHON:-python3}"
CACHE="${GGUF_MTP_WHEEL_CACHE:-$HOME/.cache/gguf-mtp/wheels}"
CMAKE_ARGS="${CMAKE_ARGS:-}"

# Vulkan: llama.cpp's ggml-vulkan uses VK_EXT_layer_settings, which Vulkan-Headers
# only ship from 1.3.272 (Debian 12 has 1.3.239). With older headers we put our
# shim scripts/vulkan-compat/include first on the C++ include path; it forwards to
# the system <vulkan/vulkan.hpp> and adds the missing types (llama.cpp is untouched).
vulkan_header_version() {
    printf '#include <vulkan/vulkan_core.h>\nVK_HEADER_VERSION\n' |
        "${CXX:-c++}" -E -P -x c++ ${VULKAN_SDK:+-I"$VULKAN_SDK/include"} - 2>/dev/null | tail -n 1 | tr -dc '0-9'
}
if printf '%s' "$CMAKE_ARGS" | grep -Eqi -- '-DGGML_VULKAN(:BOOL)?=(on|1|yes|true)([[:space:]]|$)'; then
    VK_HDR="$(vulkan_header_version || true)"
    VK_COMPAT="$PWD/scripts/vulkan-compat/include"
    if [ -z "$VK_HDR" ]; then
        echo "setup: warning: <vulkan/vulkan_core.h> not found (Debian/Ubuntu: apt-get install libvulkan-dev glslc)" >&2
    elif [ "$VK_HDR" -lt 272 ]; then
        if printf '%s' "$CMAKE_ARGS" | grep -q -- 'CMAKE_CXX_FLAGS'; then
            echo "setup: Vulkan headers (VK_HEADER_VERSION $VK_HDR) predate 1.3.272 and CMAKE_ARGS sets CMAKE_CXX_FLAGS itself: add -I$VK_COMPAT to it" >&2
        else
            case "$VK_COMPAT" in *[[:space:]]*)
                echo "setup: error: the path $VK_COMPAT contains whitespace; move the checkout" >&2; exit 1;;
            esac
            CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CXX_FLAGS=-I$VK_COMPAT"
            echo "setup: Vulkan headers (VK_HEADER_VERSION $VK_HDR) predate VK_EXT_layer_settings (1.3.272): adding $VK_COMPAT to the C++ include path" >&2
        fi
    fi
fi
export CMAKE_ARGS
# The cache key is the effective CMAKE_ARGS (including the shim's path, if added).
TAG="$(printf '%s|%s' "$LLAMA_CPP_PYTHON_VERSION" "$CMAKE_ARGS" | sha1sum | cut -c1-12)"
WHEEL_DIR="$CACHE/$TAG"

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

if ! ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (CMAKE_ARGS='$CMAKE_ARGS'); ~5 min, cached in $WHEEL_DIR" >&2
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
