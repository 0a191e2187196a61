#!/usr/bin/env bash
# session 24 call 1 (H200): the release table on the shipped path (patches 0001 and 0002, as setup.sh builds them):
# the 9B shape (Q8_0, ~70% head, 32k draft vocabulary), every k for llama.cpp's MTP and for run, each run row the
# median of three processes; the full head beside (GGUF_MTP_DRAFT_VOCAB=0); auto against the best fixed k in
# three alternating pairs
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="1 2 3 4" PERF=--perf BUDGET=585 \
  ONESHOT_ARGS="--repeat 3 --versus best auto --ab-n 3" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
