#!/usr/bin/env bash
# session 23 call 2 (H200): the 9B shape (Q8_0, 32k draft vocabulary), a perfect head and a ~70% one: auto with a
# free first choice and the prompt's checks of the head's first draft (this checkout, A) against auto before them
# (.carry/old: main at 22ad890, B), three alternating pairs; then the proposed 0007 (A: conv snapshots only where a
# batch can roll back) against GGUF_MTP_CONV_SNAPSHOTS=all (B) for auto, three pairs
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 HEADS="perfect noisy" DRAFTS="2 4" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 3 --ab - PYTHONPATH=$PWD/.carry/old:/tmp/site --ab - GGUF_MTP_CONV_SNAPSHOTS=all --ab-rows auto --ab-rows auto --ab-n 3" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
