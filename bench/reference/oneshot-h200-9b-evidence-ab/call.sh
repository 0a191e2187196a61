#!/usr/bin/env bash
# session 22 call 1 (H200): the 9B shape's one-shot rows (three processes a run row) and auto with EVIDENCE (this
# checkout, A) against auto before it (.carry/old: main at 804634c, B) in six alternating pairs
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2 3" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 2 3 --repeat 3 --ab - PYTHONPATH=$PWD/.carry/old:/tmp/site --ab-rows auto --ab-n 6" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -80
