#!/usr/bin/env bash
# (bench/diag/0003.patch was the withdrawn 0003 as in commit 869a1bb; bench/diag/graph-debug.patch is graph-debug.patch here)
# one device call: build 0001-0004 (+ withdrawn 0003 and a debug print), make the 9B ~72% model with a 32k map,
# run bench/length_change.py under several settings
set -uo pipefail
T0=$SECONDS
BDIR=/tmp/b; SRC=$BDIR/llama_cpp_python-0.3.36
rm -rf $BDIR && mkdir -p $BDIR && tar xzf .carry/llama_cpp_python-0.3.36-trim.tar.gz -C $BDIR
for p in patches/llama.cpp/*.patch patches/llama.cpp/proposed/*.patch bench/diag/0003.patch bench/diag/graph-debug.patch; do
  patch -d $SRC/vendor/llama.cpp -p1 --forward --batch --fuzz=0 -s < $p || { echo "$p does not apply"; exit 1; }
  echo "applied $p"
done
BUDGET=1 GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 bash bench/gpu.sh shapes 9b:q8_0 > $OUT/shapes.log 2>&1
tail -5 $OUT/shapes.log
M="$(grep -m1 -i '^9b q8_0, noisy head.*, draft vocab 32768=' /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)"
echo "model: $M ($((SECONDS-T0)) s)"
cat "$M" > /dev/null
lc() { echo "=== $*"; env "$@" PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout 200 python3 -m bench.length_change "$M" -ngl 99 ${LC_ARGS:-} 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -${TAILN:-40}; }
lc GGML_CUDA_GRAPH_MAX_SHAPES=1 GGUF_MTP_GRAPH_DEBUG=30
lc GGML_CUDA_GRAPH_MAX_SHAPES=8 GGUF_MTP_GRAPH_DEBUG=30
lc GGML_CUDA_DISABLE_GRAPHS=1
lc LLAMA_GRAPH_REUSE_DISABLE=1 GGML_CUDA_GRAPH_MAX_SHAPES=1
lc GGML_CUDA_GRAPH_MAX_SHAPES=1 GGUF_MTP_DRAFT_CHAIN=0
lc GGML_CUDA_GRAPH_MAX_SHAPES=1
lc GGML_CUDA_GRAPH_MAX_SHAPES=8
echo "done at $((SECONDS-T0)) s"
