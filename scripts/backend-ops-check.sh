#!/usr/bin/env bash
# llama.cpp's own op tests (test-backend-ops) for the ops gguf-mtp's patches change or add cases to, on a machine
# without a GPU: test-backend-ops is built from the patched vendored source (scripts/setup.sh --source-only) against
# a venv's Vulkan build of the same patch set and run on Mesa's lavapipe, each op's results checked against the CPU
# back-end. A CUDA-only patch's kernel does not run here; the test cases it adds do, on both back-ends' stock kernels.
#
#   VK_VENV=.venv-vk bash scripts/backend-ops-check.sh            # ARGMAX (patch 0011's vocabulary-sized and tied cases)
#   VK_VENV=.venv-vk bash scripts/backend-ops-check.sh ARGMAX CONCAT
#
# env: VK_VENV (required: a venv holding a Vulkan build, CMAKE_ARGS="-DGGML_VULKAN=on" VENV=... scripts/setup.sh),
#      GGUF_MTP_SDIST (as setup.sh), CXX (default g++), VK_ICD_FILENAMES / VK_DRIVER_FILES (default lavapipe).
set -euo pipefail
cd "$(dirname "$0")/.."
VK_VENV="${VK_VENV:?set VK_VENV to a venv holding a Vulkan build of llama-cpp-python}"
[ $# -gt 0 ] || set -- ARGMAX
for op in "$@"; do
    case "$op" in *[!A-Z0-9_]*|"") echo "backend-ops-check: '$op' is not an op name (as ARGMAX)" >&2; exit 2 ;; esac
done
[ -x "$VK_VENV/bin/python" ] ||
    { echo "backend-ops-check: error: $VK_VENV is not a venv (set VK_VENV to one made by scripts/setup.sh)" >&2; exit 1; }
LIB="$("$VK_VENV/bin/python" -c 'import pathlib, llama_cpp; print(pathlib.Path(llama_cpp.__file__).parent / "lib")')" ||
    { echo "backend-ops-check: error: $VK_VENV has no llama_cpp (set VK_VENV to a venv made by scripts/setup.sh)" >&2; exit 1; }
[ -e "$LIB/libggml-vulkan.so" ] ||
    { echo "backend-ops-check: error: $LIB has no libggml-vulkan.so: build it with CMAKE_ARGS=\"-DGGML_VULKAN=on\" VENV=$VK_VENV bash scripts/setup.sh" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
bash scripts/setup.sh --source-only "$WORK/llama.cpp"
SRC="$WORK/llama.cpp"
# the venv's library must carry the patch set the source got, or the test's cases are not the library's
cmp -s "$SRC/.gguf-mtp-llama-patches" "$VK_VENV/.gguf-mtp-llama-patches" ||
    { echo "backend-ops-check: error: $VK_VENV was built with patches [$(tr '\n' ' ' < "$VK_VENV/.gguf-mtp-llama-patches" 2>/dev/null)], patches/llama.cpp holds [$(tr '\n' ' ' < "$SRC/.gguf-mtp-llama-patches")]: run CMAKE_ARGS=\"-DGGML_VULKAN=on\" VENV=$VK_VENV bash scripts/setup.sh" >&2; exit 1; }
echo "backend-ops-check: building test-backend-ops against $LIB" >&2
"${CXX:-g++}" -O1 -std=c++17 "$SRC/tests/test-backend-ops.cpp" -I"$SRC/ggml/include" \
    -L"$LIB" -lggml -lggml-base -Wl,-rpath,"$LIB" -lpthread -o "$WORK/test-backend-ops"
# shellcheck source=scripts/lavapipe-env.sh
source scripts/lavapipe-env.sh backend-ops-check
rc=0
for op in "$@"; do
    # test-backend-ops prints "N/M tests passed" per back-end and exits non-zero on a failure; a crash is a failure too
    # and a filter that ran no case is one too
    if "$WORK/test-backend-ops" test -b Vulkan0 -o "$op" > "$WORK/$op.log" 2>&1 &&
            passed="$(grep -m1 -o "[1-9][0-9]*/[0-9]* tests passed" "$WORK/$op.log")" &&
            [ "${passed%%/*}" = "$(echo "${passed#*/}" | cut -d' ' -f1)" ]; then
        echo "backend-ops-check: $op: $passed on Vulkan0 against the CPU"
    else
        grep -v "^ggml_vulkan\|^\[New\|^  .*: .*OK" "$WORK/$op.log" | tail -n 20 >&2
        echo "backend-ops-check: error: test-backend-ops -o $op failed on Vulkan0 (see above)" >&2
        rc=1
    fi
done
exit $rc
