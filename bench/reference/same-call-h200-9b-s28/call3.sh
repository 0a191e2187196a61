#!/usr/bin/env bash
# session 28 call 3 (calls 1-2's machine, still held): eight rounds of llama-completion, llama.cpp's MTP k=3 and k=2,
# `run` k=2, auto and --no-mtp, alternating.
BUDGET_S=420 EXTRA_PATCH=0009 source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 8); do
  [ "$(left)" -gt 60 ] || break
  lc; spec 3; run k2 --spec-draft-n-max 2; spec 2; run auto; run plain --no-mtp
done
cmp /tmp/out-plain.txt /tmp/out-k2.txt && cmp /tmp/out-plain.txt /tmp/out-auto.txt && echo "texts equal"
echo "[$((SECONDS - T0))s] done"
