#!/usr/bin/env bash
# session 22 call 2 (H200, right after call 1: its llama.cpp build reused when the machine is still warm): the 27B
# shape's one-shot rows, one process a row, auto with EVIDENCE
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2 3 4" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 2 3 4" \
  bash bench/gpu.sh shapes 27b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
