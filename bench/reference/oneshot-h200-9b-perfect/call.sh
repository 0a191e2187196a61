#!/usr/bin/env bash
# session 21 call 3 (H200): the 9B shape with a perfect head (32k draft vocabulary), one process a row, in what is
# left of the session's device time
set -uo pipefail
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 HEADS=perfect DRAFTS="4 6" PERF= BUDGET=370 \
  ONESHOT_ARGS="--spec-drafts 4 6" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -40
