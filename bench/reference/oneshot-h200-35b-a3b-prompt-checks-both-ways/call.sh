#!/usr/bin/env bash
# session 23 call 1 (H200): the 35B-A3B shape (Q4_K_M trunk, ~72% head, 32k draft vocabulary): auto with a free
# first choice and the prompt's checks of the head's first draft, counted below typical too (this checkout then,
# A) against auto before them
# (.carry/old: main at 22ad890, B), four alternating pairs; llama-completion, plain, k=2 and auto beside
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 2 --ab - PYTHONPATH=$PWD/.carry/old:/tmp/site --ab-rows auto --ab-n 4" \
  bash bench/gpu.sh shapes 35b-a3b:q4_k_m 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
cp /tmp/gguf-mtp-out/oneshot.json "$OUT/" 2>/dev/null; cp /tmp/gguf-mtp-out/oneshot.txt "$OUT/" 2>/dev/null; true
