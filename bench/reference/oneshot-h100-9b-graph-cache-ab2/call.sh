#!/usr/bin/env bash
# (patches/llama.cpp/proposed/ then held 0003-cuda-graph-per-shape-v2.patch, kept here, beside 0004)
# one-shot rows on the 9B ~72% model with a 32k map (patches 0001-0004, 0003 v2), then in alternating processes:
# the stock graph cache (GGML_CUDA_GRAPH_MAX_SHAPES=1) against 0003's (8), k=2 and auto; then auto from the package
# at 53c73ad against this one (both with 0003's cache)
set -uo pipefail
[ -x /tmp/lcpp/bin/llama-completion ] && echo "build present (warm machine)" || echo "no build: a fresh machine"
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2" PERF= BUDGET=590 \
  ONESHOT_ARGS="--spec-drafts 2 --ab GGML_CUDA_GRAPH_MAX_SHAPES=1 - --ab-rows best,auto --ab PYTHONPATH=$PWD/.carry/before53:/tmp/site - --ab-rows auto --ab-n 4" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -80
