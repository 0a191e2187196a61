#!/usr/bin/env bash
# Creates .venv with gguf-mtp (editable) and a llama-cpp-python built from source.
# The wheel build (~5 min on 2 cores) is cached per version and CMAKE_ARGS in
# $GGUF_MTP_WHEEL_CACHE (default ~/.cache/gguf-mtp/wheels), so later runs install in seconds.
#   CMAKE_ARGS="-DGGML_CUDA=on" bash scripts/setup.sh      # CUDA build (every build adds -DGGML_RPC=ON)
#   CMAKE_ARGS="-DGGML_VULKAN=on" bash scripts/setup.sh    # Vulkan build (needs libvulkan-dev, glslc,
#                                                          # spirv-headers; headers < 1.3.272 get scripts/vulkan-compat)
#   bash scripts/setup.sh --wheel-only                     # only make sure the cache holds a checked wheel; print its path
#   GGUF_MTP_PATCHES=0 bash scripts/setup.sh               # the stock llama.cpp, without patches/llama.cpp (own cache key)
#   GGUF_MTP_PATCHES=proposed bash scripts/setup.sh        # also the patches in patches/llama.cpp/proposed (to measure)
# The patches in patches/llama.cpp/*.patch (name order; each names the marker symbol it exports) are applied to the
# sdist's vendor/llama.cpp before the build; one that does not apply stops the build (nothing is cached). Their
# content is part of the cache key; with GGUF_MTP_PATCHES=0 the key is the one a setup.sh without patches used.
# A wheel enters the cache only after gguf_mtp/backends.py has loaded it and found the backends CMAKE_ARGS
# asks for; a cached wheel that fails that check is rebuilt. pip's own cache is never used for it.
# env: VENV, PYTHON, CMAKE_ARGS, GGUF_MTP_WHEEL_CACHE, GGUF_MTP_SKIP_PREREQS=1 (build even when the
#      prerequisite check fails), GGUF_MTP_WHEEL_BUILD_CMD (build with this bash command instead of pip; it
#      gets the output folder as $1 and must leave one llama_cpp_python-*.whl there: an offline build, tests;
#      with patches it gets the patched sdist folder as $2), GGUF_MTP_PATCHES=0|1|proposed (default 1),
#      GGUF_MTP_SDIST (the llama-cpp-python sdist .tar.gz to patch instead of downloading it)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
# its sdist, as PyPI serves it: a download (or a cached copy) with other bytes is refused
LLAMA_CPP_PYTHON_SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PY="${PYTHON:-python3}"
CACHE="${GGUF_MTP_WHEEL_CACHE:-$HOME/.cache/gguf-mtp/wheels}"
CMAKE_ARGS="${CMAKE_ARGS:-}"
# ggml's RPC backend is always built (gguf-mtp run --rpc, gguf-mtp rpc-server); -DGGML_RPC=OFF opts out
case "$CMAKE_ARGS" in *-DGGML_RPC*) ;; *) CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_RPC=ON" ;; esac
WHEEL_ONLY=0
SOURCE_ONLY=""
case "${1:-}" in
    --wheel-only) WHEEL_ONLY=1 ;;
    --source-only)
        SOURCE_ONLY="${2:-}"
        [ -n "$SOURCE_ONLY" ] || { echo "usage: bash scripts/setup.sh --source-only DIR" >&2; exit 2; }
        case "$SOURCE_ONLY" in /*) ;; *) SOURCE_ONLY="$OLDPWD/$SOURCE_ONLY" ;; esac  # the caller's folder, not ours
        [ ! -e "$SOURCE_ONLY" ] ||
            { echo "setup: error: $SOURCE_ONLY exists: --source-only writes a new folder (remove it, or name another)" >&2; exit 1; } ;;
    "") ;;
    *) echo "usage: bash scripts/setup.sh [--wheel-only | --source-only DIR]" >&2; exit 2 ;;
esac

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
        :  # no headers: the prerequisite check before a build says what to install
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
# The cache key is the effective CMAKE_ARGS (the shim, if added, by its content).
# The shim's path stands in the key as its content's hash: a clone elsewhere (CI's) reuses the same build.
KEY_ARGS="$CMAKE_ARGS"
if [ -n "${VK_COMPAT:-}" ] && [ -d "$VK_COMPAT" ]; then
    SHIM="$(cd "$VK_COMPAT" && find . -type f -print0 | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12)"
    KEY_ARGS="${CMAKE_ARGS//$VK_COMPAT/vulkan-compat@$SHIM}"
fi
# llama.cpp patches: by their content in the key, so editing one builds again; none: the stock key
PATCH_DIR="$PWD/patches/llama.cpp"
PATCHES=()
case "${GGUF_MTP_PATCHES:-1}" in
    0) ;;
    1) for p in "$PATCH_DIR"/*.patch; do [ -f "$p" ] && PATCHES+=("$p"); done ;;
    proposed)  # and those still to be measured, in number order (patches/llama.cpp/proposed)
       while IFS= read -r p; do PATCHES+=("$p"); done < <(
           for p in "$PATCH_DIR"/*.patch "$PATCH_DIR"/proposed/*.patch; do [ -f "$p" ] && printf '%s\t%s\n' "${p##*/}" "$p"; done |
           sort | cut -f2) ;;
    *) echo "setup: error: GGUF_MTP_PATCHES=${GGUF_MTP_PATCHES} : use 1 (apply patches/llama.cpp, the default), 0 (stock llama.cpp) or proposed (also patches/llama.cpp/proposed)" >&2
       exit 2 ;;
esac
PATCH_NAMES=""
if [ ${#PATCHES[@]} -gt 0 ]; then
    for p in "${PATCHES[@]}"; do n="${p##*/}"; n="${n%.patch}"; PATCH_NAMES="${PATCH_NAMES:+$PATCH_NAMES, }${n#[0-9][0-9][0-9][0-9]-}"; done
    PATCH_HASH="$(cd "$PATCH_DIR" && for p in "${PATCHES[@]}"; do sha1sum -- "${p#"$PATCH_DIR"/}"; done | sha1sum | cut -c1-12)"
    KEY_ARGS="$KEY_ARGS|llama.cpp-patches@$PATCH_HASH"
fi
# Unpacks the llama-cpp-python sdist (GGUF_MTP_SDIST, else the cached one, else downloaded with $1 -m pip into $2
# and cached once its hash is checked) into $2/src and applies $PATCHES to its vendor/llama.cpp; sets SRC to the
# unpacked llama_cpp_python folder. A failure exits with one line.
unpack_patched() {
    local py="$1" dest="$2" name="llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    command -v patch >/dev/null ||
        { echo "setup: error: applying patches/llama.cpp needs GNU patch (apt-get install patch); GGUF_MTP_PATCHES=0 builds the stock library" >&2; exit 1; }
    SDIST="${GGUF_MTP_SDIST:-}"
    if [ -z "$SDIST" ]; then
        SDIST="$CACHE/sdist/$name"
        if [ ! -f "$SDIST" ]; then
            "$py" -m pip download -q --no-deps --no-binary :all: \
                "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$dest/sdist" ||
                { echo "setup: error: cannot download the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist to patch (see above); GGUF_MTP_SDIST=FILE uses a local one, GGUF_MTP_PATCHES=0 builds the stock library" >&2; exit 1; }
            [ "$(sha256sum < "$dest/sdist/$name" | cut -d' ' -f1)" = "$LLAMA_CPP_PYTHON_SDIST_SHA256" ] ||
                { echo "setup: error: the downloaded $name is not the sdist PyPI published (sha256 differs): nothing was cached; retry, or GGUF_MTP_SDIST=FILE" >&2; exit 1; }
            # a copy beside the cache entry, renamed into place: never a half-written entry (the EXIT trap removes it)
            PARTIAL="$SDIST.$$"
            mkdir -p "$CACHE/sdist" && mv "$dest/sdist/$name" "$PARTIAL" && mv -f "$PARTIAL" "$SDIST"
            PARTIAL=""
        elif [ "$(sha256sum < "$SDIST" | cut -d' ' -f1)" != "$LLAMA_CPP_PYTHON_SDIST_SHA256" ]; then
            echo "setup: error: the cached $SDIST is not the sdist PyPI published (sha256 differs): remove it to download it again" >&2
            exit 1
        fi
    fi
    mkdir "$dest/src"
    tar xzf "$SDIST" -C "$dest/src" ||
        { echo "setup: error: cannot unpack the llama-cpp-python sdist $SDIST" >&2; exit 1; }
    SRC="$dest/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    [ -d "$SRC/vendor/llama.cpp" ] ||
        { echo "setup: error: $SDIST has no llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" >&2; exit 1; }
    for p in "${PATCHES[@]}"; do
        if ! patch -d "$SRC/vendor/llama.cpp" -p1 --forward --batch --fuzz=0 --no-backup-if-mismatch \
                --reject-file=- --quiet < "$p" >/dev/null 2>&1; then
            echo "setup: error: patch patches/llama.cpp/${p#"$PATCH_DIR"/} does not apply to llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendor/llama.cpp: nothing was built or cached (update the patch, or GGUF_MTP_PATCHES=0 for the stock library)" >&2
            exit 1
        fi
    done
    [ ${#PATCHES[@]} = 0 ] || echo "setup: applied patches/llama.cpp: $PATCH_NAMES" >&2
}

# the applied patches' names, one a line, into $1: what a venv's wheel and a --source-only tree were patched with
record_patches() { printf '%s\n' ${PATCH_NAMES//,/} > "$1"; }

# --source-only DIR: the patched vendor/llama.cpp alone (test-backend-ops is built from it: scripts/backend-ops-check.sh)
if [ -n "$SOURCE_ONLY" ]; then
    mkdir -p "$(dirname "$SOURCE_ONLY")"
    BUILD="$(mktemp -d "$(dirname "$SOURCE_ONLY")/.llama-src.XXXXXX")"
    trap 'rm -rf "$BUILD" ${PARTIAL:+"$PARTIAL"}' EXIT
    trap 'exit 130' INT TERM
    unpack_patched "$PY" "$BUILD"
    record_patches "$SRC/vendor/llama.cpp/.gguf-mtp-llama-patches"
    mv -T "$SRC/vendor/llama.cpp" "$SOURCE_ONLY"
    echo "setup: wrote $SOURCE_ONLY (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendor/llama.cpp, patches: ${PATCH_NAMES:-none})" >&2
    exit 0
fi
TAG="$(printf '%s|%s' "$LLAMA_CPP_PYTHON_VERSION" "$KEY_ARGS" | sha1sum | cut -c1-12)"
WHEEL_DIR="$CACHE/$TAG"

if [ "$WHEEL_ONLY" = 1 ]; then
    CHECK_PY="$PY"  # the checker needs only the standard library
else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    CHECK_PY="$VENV/bin/python"
fi
backends() { "$CHECK_PY" gguf_mtp/backends.py "$@"; }
WANT="$(backends requested --cmake-args="$CMAKE_ARGS")"
echo "setup: llama-cpp-python $LLAMA_CPP_PYTHON_VERSION with backends: CPU${WANT:+ $WANT} (CMAKE_ARGS='$CMAKE_ARGS')" >&2
echo "setup: llama.cpp patches: ${PATCH_NAMES:-none (stock)}" >&2

cached_wheel() { ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl 2>/dev/null | head -n 1 || true; }
WHEEL="$(cached_wheel)"
# A cached wheel is checked like a new one: an older setup.sh cached whatever pip handed it (pip's own
# cache is keyed by the sdist, not by CMAKE_ARGS, and served CPU builds under the Vulkan key).
if [ -n "$WHEEL" ]; then
    rc=0; backends check-wheel "$WHEEL" --cmake-args="$CMAKE_ARGS" || rc=$?
    if [ "$rc" = 1 ]; then
        echo "setup: the cached wheel in $WHEEL_DIR is not the build CMAKE_ARGS asks for: removing it and building again" >&2
        rm -rf "$WHEEL_DIR"
        WHEEL=""
    elif [ "$rc" != 0 ]; then  # 3: a sound wheel that cannot load on this machine (kept)
        echo "setup: error: the cached wheel $WHEEL does not load here (see above); fix that, or remove $WHEEL_DIR to rebuild" >&2
        exit 1
    fi
fi
if [ -z "$WHEEL" ]; then
    if ! backends prereqs --cmake-args="$CMAKE_ARGS"; then
        if [ "${GGUF_MTP_SKIP_PREREQS:-0}" = 1 ]; then
            echo "setup: GGUF_MTP_SKIP_PREREQS=1: building anyway" >&2
        else
            echo "setup: install what is missing and run again (GGUF_MTP_SKIP_PREREQS=1 builds anyway)" >&2
            exit 1
        fi
    fi
    mkdir -p "$CACHE"
    BUILD="$(mktemp -d "$CACHE/.build-$TAG.XXXXXX")"
    trap 'rm -rf "$BUILD" ${PARTIAL:+"$PARTIAL"}' EXIT
    trap 'exit 130' INT TERM  # the EXIT trap removes the half-built wheel
    echo "setup: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (CMAKE_ARGS='$CMAKE_ARGS'); ~5 min, cached in $WHEEL_DIR" >&2
    mkdir "$BUILD/out"
    SRC=""  # the patched sdist folder; empty: pip builds the stock sdist
    if [ ${#PATCHES[@]} -gt 0 ]; then
        # patched in a copy inside $BUILD, which the EXIT trap removes: a failure leaves nothing half-applied
        unpack_patched "$CHECK_PY" "$BUILD"
    fi
    if [ -n "${GGUF_MTP_WHEEL_BUILD_CMD:-}" ]; then
        bash -c "$GGUF_MTP_WHEEL_BUILD_CMD" build "$BUILD/out" "$SRC"
    else
        # --no-cache-dir: pip's wheel cache is keyed by the sdist alone and would hand back an earlier
        # build made with other CMAKE_ARGS
        CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
            "$CHECK_PY" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
            "${SRC:-llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION}" -w "$BUILD/out"
    fi
    NEW="$(ls "$BUILD"/out/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
    if [ -z "$NEW" ]; then
        echo "setup: error: the build left no llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION-*.whl; nothing was cached" >&2
        exit 1
    fi
    if ! backends check-wheel "$NEW" --cmake-args="$CMAKE_ARGS"; then
        echo "setup: error: the new wheel is not the build CMAKE_ARGS asks for (see above); it was not cached" >&2
        exit 1
    fi
    mkdir "$BUILD/entry" && mv "$NEW" "$BUILD/entry/"
    rm -rf "$WHEEL_DIR" && mv -T "$BUILD/entry" "$WHEEL_DIR"
    WHEEL="$(cached_wheel)"
    echo "setup: cached $WHEEL" >&2
fi
if [ "$WHEEL_ONLY" = 1 ]; then
    echo "$WHEEL"
    exit 0
fi
# By path and reinstalled, so an installed build of the same version (another CMAKE_ARGS) is replaced;
# the second call adds the wheel's own dependencies.
"$VENV/bin/python" -m pip install -q --no-cache-dir --no-deps --force-reinstall "$WHEEL"
"$VENV/bin/python" -m pip install -q "$WHEEL"
backends check-installed "$VENV/bin/python" --cmake-args="$CMAKE_ARGS" ||
    { echo "setup: error: the llama-cpp-python installed in $VENV is not the wheel just checked (see above)" >&2; exit 1; }
"$VENV/bin/python" -m pip install -q -e ".[test,serve,lint,plot]"
touch "$VENV/.gguf-mtp-installed"
# which patches this venv's wheel was built with (tests/test_patches.py checks the library's markers against it)
record_patches "$VENV/.gguf-mtp-llama-patches"
echo "setup: ready ($VENV)" >&2
