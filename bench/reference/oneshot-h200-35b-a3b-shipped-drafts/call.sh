#!/usr/bin/env bash
# session 23 call 3 (H200): the 35B-A3B shape (Q4_K_M trunk, ~72% head, 32k draft vocabulary), one decode per draft
# (GGUF_MTP_DRAFT_CHAIN=0: the shipped path; the build has the proposed patches for 0007's switch): k=2 and auto in
# three processes each; auto with a free first choice and the prompt's checks counted only for a head better than
# typical (this checkout, A) against auto before this session (.carry/old: main at 22ad890, B), four alternating
# pairs; and the proposed 0007 (A) against GGUF_MTP_CONV_SNAPSHOTS=all (B) for auto, three pairs
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
export GGUF_MTP_DRAFT_CHAIN=0
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2" PERF= BUDGET=585 \
  ONESHOT_ARGS="--spec-drafts 2 --repeat 3 --ab - PYTHONPATH=$PWD/.carry/old:/tmp/site --ab - GGUF_MTP_CONV_SNAPSHOTS=all --ab-rows auto --ab-rows auto --ab-n 4" \
  bash bench/gpu.sh shapes 35b-a3b:q4_k_m 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -40
