#!/usr/bin/env bash
# session 33 call 1 (fresh H200): builds the vendored llama.cpp (CUDA) with the shipped patches (0001 0002 0006 0008
# 0010 0011); test-backend-ops ARGMAX (stock kernel and split: patch 0011's fixed tie check, first run on CUDA) and
# CONCAT with narrow rows, against the CPU; then the 35B-A3B shape (the MoE, Q4_K_M, ~83% head, 32k draft
# vocabulary): rounds of llama-completion, `run` k=2, k=1, auto, and llama.cpp's MTP k=1 / k=2 alternately.
# Issue 24: >= 1.3x llama-completion, never below 1.0x at any k auto picks.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=35b-a3b TRUNK=q4_k_m EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
SRC=$(ls -d /tmp/b/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
g++ -O2 -std=c++17 "$SRC/tests/test-backend-ops.cpp" -I"$SRC/ggml/include" -L/tmp/lcpp/bin -lggml -lggml-base \
   -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/lcpp/bin/test-backend-ops > /tmp/tbo.log 2>&1 || tail -5 /tmp/tbo.log
{ echo "== ARGMAX, stock kernel"; timeout 60 /tmp/lcpp/bin/test-backend-ops test -o ARGMAX 2>&1 | tail -3
  echo "== ARGMAX, split"; GGML_CUDA_ARGMAX_SPLIT=1 timeout 60 /tmp/lcpp/bin/test-backend-ops test -o ARGMAX 2>&1 | tail -3
  echo "== CONCAT, narrow rows"; GGML_CUDA_CONCAT_NARROW_ROWS=1 timeout 60 /tmp/lcpp/bin/test-backend-ops test -o CONCAT 2>&1 | tail -2
} 2>&1 | tee "$OUT/backend-ops.txt"
echo "[$((SECONDS - T0))s] rounds; $(left) s left"
run plain --no-mtp
for i in $(seq 1 30); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; run k1 --spec-draft-n-max 1; run auto --spec-draft-n-max auto
  if [ $((i % 2)) = 1 ]; then spec 1; else spec 2; fi
done
echo "[$((SECONDS - T0))s] done"
