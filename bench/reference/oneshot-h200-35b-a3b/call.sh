#!/usr/bin/env bash
# session 22 call 3 (H200): the 35B-A3B shape (Q4_K_M trunk, ~72% head) one-shot rows, one process a row, auto
# with EVIDENCE; and the MoE head's padding to one shape (this checkout, A) against none (.carry/nopad: the same
# package with stable shapes off, B), k=2 and auto, three alternating pairs each
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="1 2 3" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 1 2 --ab - PYTHONPATH=$PWD/.carry/nopad:/tmp/site --ab-rows 2 --ab-rows auto --ab-n 3" \
  bash bench/gpu.sh shapes 35b-a3b:q4_k_m 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
