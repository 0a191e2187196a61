#!/usr/bin/env bash
# session 26 call 2 (H200, call 1's machine still held: its build of 0001, 0002, 0004, 0007 and its file): ggml-cuda's
# concurrent streams (GGML_CUDA_GRAPH_OPT=1) against the default, in alternating processes, on llama-completion,
# run k=2, llama.cpp's MTP k=2 and run auto, with one decode a draft (GGUF_MTP_DRAFT_CHAIN=0, the shipped path)
set -uo pipefail
T0=$SECONDS
left() { echo $(( 588 - (SECONDS - T0) )); }
ls /tmp/lcpp/bin/llama-completion >/dev/null || { echo "no build: a fresh machine"; exit 3; }
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1 GGUF_MTP_DRAFT_CHAIN=0
timeout $(( $(left) - 3 )) python3 -m bench.oneshot --model "9b Q8_0, noisy head, draft vocab 32768=$M" \
  --bin /tmp/lcpp/bin --ngl 99 -n 256 --drafts 2 --spec-drafts 2 \
  --ab - GGML_CUDA_GRAPH_OPT=1 --ab-rows best,lc,spec,auto --ab-n 4 \
  --out $OUT/oneshot.json 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -30
echo "[$((SECONDS - T0))s] done"
