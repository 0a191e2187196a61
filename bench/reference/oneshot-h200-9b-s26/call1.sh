#!/usr/bin/env bash
# session 26 call 1 (H200, a fresh machine): one build of the shipped and proposed patches (0001, 0002, 0004, 0007)
# and the 9B shape (Q8_0, ~70% head, 32k draft vocabulary); then, each pair of processes alternating: auto (this
# session's controller) against the best fixed k; the chained drafts (0004) against one decode a draft
# (GGUF_MTP_DRAFT_CHAIN=0); GGML_CUDA_GRAPH_OPT=1 (ggml-cuda's concurrent streams) on llama-completion and run k=2.
set -uo pipefail
T0=$SECONDS
left() { echo $(( 588 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
lscpu | grep -m1 "Model name"; nproc
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error\|patch" | tail -6
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "[$((SECONDS - T0))s] model: $M; $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
timeout $(( $(left) - 3 )) python3 -m bench.oneshot --model "9b Q8_0, noisy head, draft vocab 32768=$M" \
  --bin /tmp/lcpp/bin --ngl 99 -n 256 --drafts 2 --spec-drafts 2 --versus best auto \
  --ab GGUF_MTP_DRAFT_CHAIN=0 - --ab - GGML_CUDA_GRAPH_OPT=1 --ab-rows best --ab-rows lc,best --ab-n 3 \
  --out $OUT/oneshot.json 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -40
echo "[$((SECONDS - T0))s] done"
