#!/usr/bin/env bash
# session 33 call 2 (call 1's machine, still held: build reused; call 1's models removed for the disk): the 27B shape
# (64 layers, 5120 wide, Q8_0, ~68% head, 32k draft vocabulary) on the shipped path: rounds of llama-completion,
# `run` k=2, k=3, auto, and llama.cpp's MTP k=2 / k=3 alternately; one `--no-mtp`. Issue 24's target: >= 2.0x
# llama-completion (session 22: 1.75x, before patches 0006, 0008, 0010, 0011).
rm -rf /tmp/gguf-mtp-bench
export BUDGET_S=${BUDGET_S:-530} SHAPE=27b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
run plain --no-mtp
for i in $(seq 1 30); do [ "$(left)" -gt 40 ] || break
  lc; run k2 --spec-draft-n-max 2; run k3 --spec-draft-n-max 3; run auto --spec-draft-n-max auto
  if [ $((i % 2)) = 1 ]; then spec 2; else spec 3; fi
done
echo "[$((SECONDS - T0))s] done"
