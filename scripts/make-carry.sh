#!/usr/bin/env bash
# Makes .carry/ for bench/gpu.sh on a GPU machine without network (the device tool carries it): the
# llama-cpp-python sdist trimmed to what the llama.cpp build needs (its .git, docs, models, tests but
# test-backend-ops.cpp, the web UI's sources and the back-ends gpu.sh never builds left out: about 6 MB against
# 77 MB), and the wheels of the Python packages the device lacks (gguf, diskcache; the others are in its image, KINDS.md),
# and py-spy's (.carry/pyspy) for bench/native_stacks.py.
#   bash scripts/make-carry.sh                 # downloads the sdist and the wheels (pip, from the package index)
#   GGUF_MTP_SDIST=path/to/sdist.tar.gz bash scripts/make-carry.sh   # a local sdist instead
# Then name ".carry" in the device run's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="0.3.36"
OUT=.carry
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT/whl"
SDIST="${GGUF_MTP_SDIST:-}"
if [ -z "$SDIST" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$TMP"
    SDIST="$TMP/llama_cpp_python-$VERSION.tar.gz"
fi
tar xzf "$SDIST" -C "$TMP"
P="llama_cpp_python-$VERSION"
V="$P/vendor/llama.cpp"
[ -d "$TMP/$V" ] || { echo "make-carry: error: $SDIST has no $V" >&2; exit 1; }
excludes=(--exclude="$P/.git" --exclude="$P/examples" --exclude="$P/docs")
for d in .git .github .devops docs models benches conversion media gguf-py scripts tools/ui/src tools/ui/public \
         tools/ui/tests tools/mtmd/test-3.mp4 ggml/src/ggml-sycl ggml/src/ggml-opencl ggml/src/ggml-hexagon \
         ggml/src/ggml-et ggml/src/ggml-metal ggml/src/ggml-cann ggml/src/ggml-musa ggml/src/ggml-webgpu \
         ggml/src/ggml-zdnn ggml/src/ggml-openvino; do
    excludes+=(--exclude="$V/$d")
done
# tests/: only test-backend-ops.cpp, which a proposed patch extends (and bench/gpu.sh can build alone)
find "$TMP/$V/tests" -type f ! -name test-backend-ops.cpp -delete
tar czf "$OUT/$P-trim.tar.gz.part" -C "$TMP" "${excludes[@]}" "$P"
mv "$OUT/$P-trim.tar.gz.part" "$OUT/$P-trim.tar.gz"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$OUT/whl" "gguf>=0.19.0" diskcache
# py-spy, for the native stacks of a step's host time (bench/native_stacks.py); apart, as the device installs it
# into its own folder, not beside the packages
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_5_x86_64 -d "$OUT/pyspy" py-spy
echo "make-carry: $(du -sh "$OUT" | cut -f1) in $OUT: $(ls "$OUT" "$OUT/whl" | tr '\n' ' ')"
