#!/usr/bin/env bash
# session 21 call 2 (H200): the 9B shape's one-shot rows repeated (three processes a run row), plain against
# llama-completion in alternating pairs, and auto against auto without shadow drafts (.carry/noshadow: this
# package with SHADOW_EVERY and SHADOW_DOUBT out of reach) in four alternating pairs
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2 3" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 2 3 --repeat 3 --plain-pairs 3 --ab - PYTHONPATH=$PWD/.carry/noshadow:/tmp/site --ab-rows auto --ab-n 4" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -70
