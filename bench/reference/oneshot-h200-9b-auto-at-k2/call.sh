#!/usr/bin/env bash
# session 24 call 3 (H200): why auto at k=2 is ~5% slower than a fixed k=2 on the shipped path (calls 1 and 2, where
# every auto process ran k=2 throughout). auto's target context keeps n_rs_seq = k_max = 4 rollback slots, so every
# decode of its DeltaNet layers writes 5 conv-state snapshots where a fixed k=2 writes 3; the proposed 0007 writes
# only the slots a batch can roll back. 9B shape (Q8_0, ~70% head, 32k draft vocabulary), patches 0001, 0002 and the
# proposed 0004 (switched off: GGUF_MTP_DRAFT_CHAIN=0, one decode per draft as shipped) and 0007; per-phase rows
# (--perf) of plain, k=2 and auto with 0007 and with GGUF_MTP_CONV_SNAPSHOTS=all (every slot, as without it)
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
export GGUF_MTP_DRAFT_CHAIN=0
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2" PERF=--perf BUDGET=575 \
  ONESHOT_ARGS="--spec-drafts 2 --env-row GGUF_MTP_CONV_SNAPSHOTS=all --versus best auto --ab-n 3" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
