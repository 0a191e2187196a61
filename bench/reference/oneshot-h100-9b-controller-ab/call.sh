#!/usr/bin/env bash
# (patches/llama.cpp/proposed/ then held ../oneshot-h100-9b-graph-cache-ab2/0003-cuda-graph-per-shape-v2.patch beside 0004; GGML_CUDA_GRAPH_MAX_SHAPES=1 keeps it off)
# stock graph cache everywhere (GGML_CUDA_GRAPH_MAX_SHAPES=1 on the 0001-0004 build: 0003 off): plain pairs, then
# in alternating processes the package at 53c73ad against this one, auto and k=2
set -uo pipefail
export GGML_CUDA_GRAPH_MAX_SHAPES=1
[ -x /tmp/lcpp/bin/llama-completion ] && echo "build present (warm machine)" || echo "no build: a fresh machine"
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2" PERF= BUDGET=590 \
  ONESHOT_ARGS="--spec-drafts 2 --plain-pairs 3 --ab PYTHONPATH=$PWD/.carry/before53:/tmp/site - --ab-rows auto,best --ab-n 5" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -80
