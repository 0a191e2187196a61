#!/usr/bin/env bash
# session 32 call 3 (the same machine, still held: build reused): the perfect-head 9B model with the 32k draft
# vocabulary (made here), then rounds of `run` at k=3, 4, 6 with 0012/0013 off (call 1-2: both lose) and 0006 on,
# llama-completion, and llama.cpp's MTP at k=3 and 4.
export BUDGET_S=${BUDGET_S:-530} EXTRA_PATCH="0006 0012 0013"; source bench/reference/same-call-h200-9b-s28/common.sh
export GGML_CUDA_MMVQ_MAX_BATCH=0 GGML_CUDA_MMVQ_Q8_0_WIDE=0
python3 -m bench.models --workdir /tmp/gguf-mtp-bench --shape 9b --trunks q8_0 --vocab 248320 --heads perfect \
  --draft-vocab 32768 --draft-vocab-only --manifest /tmp/gguf-mtp-bench/models-9b.txt > /tmp/perfect.log 2>&1 \
  || tail -5 /tmp/perfect.log
M=$(grep -m1 -i "^9b q8_0, perfect head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "[$((SECONDS - T0))s] perfect model: $M"; cat "$M" > /dev/null
COMMON=(-m "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --temp 0 --seed 0)
spec 3; spec 4
for i in $(seq 1 30); do [ "$(left)" -gt 25 ] || break
  run p-k4 --spec-draft-n-max 4; lc; run p-k6 --spec-draft-n-max 6; run p-k3 --spec-draft-n-max 3
done
echo "[$((SECONDS - T0))s] done"
