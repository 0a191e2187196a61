#!/usr/bin/env bash
# session 37 call 2 (call 1's machine, still held): where a decode's GPU time goes on an H200 with 0014 on and off
# (ncu through bench/gpu_kernels.py: a plain decode and a k=2 verify of 3 tokens), then more rounds of call 1's.
export BUDGET_S=${BUDGET_S:-560} SHAPE=9b EXTRA_PATCH="0014"
source bench/reference/same-call-h200-9b-s28/common.sh
for s in 1 0; do
  (export GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 PHASES="plain verify-3" GGML_CUDA_MMVQ_SHARE_Q8_1=$s
   timeout 150 bash bench/gpu.sh kernels 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -22)
  [ -f "$OUT/kernels.tgz" ] && mv "$OUT/kernels.tgz" "$OUT/kernels-share$s.tgz"
  [ -f "$OUT/kernels.txt" ] && mv "$OUT/kernels.txt" "$OUT/kernels-share$s.txt"
done
echo "[$((SECONDS - T0))s] kernels done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 45 ] || break
  lc
  run k2 --spec-draft-n-max 2; GGML_CUDA_MMVQ_SHARE_Q8_1=0 run k2-s0 --spec-draft-n-max 2
  run plain --no-mtp; GGML_CUDA_MMVQ_SHARE_Q8_1=0 run plain-s0 --no-mtp
  [ $((i % 3)) = 1 ] && spec 2
done
echo "[$((SECONDS - T0))s] done"
