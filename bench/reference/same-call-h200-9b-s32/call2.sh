#!/usr/bin/env bash
# session 32 call 2 (call 1's machine, still held): rounds of `run` k=2 with the stock mat-vec (0012's cap and 0013 off),
# with 0013's wide Q8_0 mat-vec, with stock mat-vec and stock concat (0006 off), llama-completion, llama.cpp MTP k=2.
export BUDGET_S=${BUDGET_S:-540} EXTRA_PATCH="0006 0012 0013"; source bench/reference/same-call-h200-9b-s28/common.sh
export GGML_CUDA_MMVQ_MAX_BATCH=0
for i in $(seq 1 40); do [ "$(left)" -gt 25 ] || break
  GGML_CUDA_MMVQ_Q8_0_WIDE=0 run k2-mmvq --spec-draft-n-max 2; GGML_CUDA_MMVQ_Q8_0_WIDE=1 run k2-wide --spec-draft-n-max 2
  GGML_CUDA_MMVQ_Q8_0_WIDE=0 GGML_CUDA_CONCAT_NARROW_ROWS=0 run k2-concat --spec-draft-n-max 2; lc
  [ $((i % 4)) = 1 ] && spec 2
done
echo "[$((SECONDS - T0))s] done"
