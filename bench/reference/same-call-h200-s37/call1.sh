#!/usr/bin/env bash
# session 37 call 1 (fresh H200): the shipped patches plus proposed 0014 (cuda-mmvq-share-q8-1: consecutive quantized
# mat-vecs of one activation quantize it once; GGML_CUDA_MMVQ_SHARE_Q8_1, which gguf-mtp sets where the marker is).
# (1) Correctness: `run --no-mtp` and `run` k=2 print the same text with the switch on and off (the same q8_1 bytes
# reach the same kernels). (2) Rounds: llama-completion, `run` k=2 and `run --no-mtp` with the switch on and `=0`,
# llama.cpp's MTP k=2 every third round.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=9b EXTRA_PATCH="0014"
source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 40); do [ "$(left)" -gt 45 ] || break
  lc
  run k2 --spec-draft-n-max 2; GGML_CUDA_MMVQ_SHARE_Q8_1=0 run k2-s0 --spec-draft-n-max 2
  run plain --no-mtp; GGML_CUDA_MMVQ_SHARE_Q8_1=0 run plain-s0 --no-mtp
  [ $((i % 3)) = 1 ] && spec 2
  if [ "$i" = 1 ]; then  # the texts: every row the same
    for f in k2-s0 plain plain-s0; do cmp -s /tmp/out-k2.txt "/tmp/out-$f.txt" && echo "same text: k2 $f" || echo "DIFFERENT TEXT: k2 $f"; done
    cp /tmp/out-k2.txt "$OUT/text-k2.txt"; cp /tmp/out-plain-s0.txt "$OUT/text-plain-s0.txt"
  fi
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
echo "[$((SECONDS - T0))s] done"
