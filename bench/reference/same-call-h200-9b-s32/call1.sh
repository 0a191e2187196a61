#!/usr/bin/env bash
# session 32 call 1 (fresh H200; the shipped patches + proposed 0012 cuda-mmvq-max-batch, 0013 cuda-mmvq-q8-0-wide and
# 0006 cuda-concat-narrow-rows, each switchable at run time, so one build A/Bs each): test-backend-ops MUL_MAT
# (q8_0, q4_K, q6_K) with the mat-vec capped at one column (MMQ for 2+) and Q8_0 with the wide mat-vec, against the
# CPU, then timed stock / capped / wide; CONCAT with narrow rows; one traced k=2 answer; then rounds of `run` k=2 as
# gguf-mtp sets the switches (MMQ, narrow concat), k=2 with the wide mat-vec, with the stock mat-vec, with the stock
# concat, and llama-completion.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-585} EXTRA_PATCH="0006 0012 0013"; source bench/reference/same-call-h200-9b-s28/common.sh
SRC=$(ls -d /tmp/b/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
grep -c "gguf_mtp_patch_cuda_mmvq_max_batch\|gguf_mtp_patch_cuda_mmvq_q8_0_wide\|gguf_mtp_patch_cuda_concat_narrow_rows" \
  "$SRC/ggml/src/ggml-cuda/ggml-cuda.cu" "$SRC/ggml/src/ggml-cuda/mmvq.cu" "$SRC/ggml/src/ggml-cuda/concat.cu"
g++ -O2 -std=c++17 "$SRC/tests/test-backend-ops.cpp" -I"$SRC/ggml/include" -L/tmp/lcpp/bin -lggml -lggml-base \
   -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/lcpp/bin/test-backend-ops > /tmp/tbo.log 2>&1 || tail -5 /tmp/tbo.log
T=/tmp/lcpp/bin/test-backend-ops; P="type_a=(q8_0|q4_K|q6_K),"
{ echo "== MUL_MAT test, mat-vec capped at 1 (MMQ)"; GGML_CUDA_MMVQ_MAX_BATCH=1 timeout 150 $T test -o MUL_MAT -p "$P" 2>&1 | tail -3
  echo "== MUL_MAT test, Q8_0 wide mat-vec"; GGML_CUDA_MMVQ_Q8_0_WIDE=1 timeout 100 $T test -o MUL_MAT -p "type_a=q8_0," 2>&1 | tail -3
  echo "== ARGMAX test, stock kernel and split (tie cases checked by value)"; timeout 60 $T test -o ARGMAX 2>&1 | tail -2
  GGML_CUDA_ARGMAX_SPLIT=1 timeout 60 $T test -o ARGMAX 2>&1 | tail -2
  echo "== CONCAT test, narrow rows"; GGML_CUDA_CONCAT_NARROW_ROWS=1 timeout 60 $T test -o CONCAT 2>&1 | tail -3
  for e in "GGML_CUDA_MMVQ_MAX_BATCH=0" "GGML_CUDA_MMVQ_MAX_BATCH=1" "GGML_CUDA_MMVQ_Q8_0_WIDE=1"; do echo "== MUL_MAT perf, $e"
    env "$e" timeout 100 $T perf -o MUL_MAT -p "$P" 2>&1 | grep "MUL_MAT(" | grep -v "n=512"; done
} 2>&1 | tee "$OUT/backend-ops.txt"
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info" \
  | tee "$OUT/timeline-k2.txt" | head -45
run plain --no-mtp; run k2-check --spec-draft-n-max 2; cmp /tmp/out-plain.txt /tmp/out-k2-check.txt && echo equal
for i in $(seq 1 30); do [ "$(left)" -gt 30 ] || break
  run k2 --spec-draft-n-max 2; GGML_CUDA_MMVQ_MAX_BATCH=0 run k2-wide --spec-draft-n-max 2
  GGML_CUDA_MMVQ_MAX_BATCH=0 GGML_CUDA_MMVQ_Q8_0_WIDE=0 run k2-mmvq --spec-draft-n-max 2
  GGML_CUDA_CONCAT_NARROW_ROWS=0 run k2-concat --spec-draft-n-max 2; lc
done
echo "[$((SECONDS - T0))s] done"
