#!/usr/bin/env bash
# session 28 call 1 (H200, a fresh machine): the release table in one call, rounds of alternating rows
# (llama-completion, llama.cpp's MTP k=2, `run` k=2 with and without proposed patch 0009's switch, `run` auto,
# `run --no-mtp`; the first round also llama.cpp's MTP k=1 and k=3 and `run` k=3). The build: the shipped patches
# (0001, 0002, 0008) plus proposed 0009-cuda-graph-reuse-fast-path.
BUDGET_S=585 EXTRA_PATCH=0009 source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 8); do
  [ "$(left)" -gt 75 ] || break
  lc; spec 2; run k2 --spec-draft-n-max 2; GGML_CUDA_GRAPH_REUSE_FAST_PATH=0 run k2-no9 --spec-draft-n-max 2
  run auto; run plain --no-mtp
  if [ "$i" = 1 ]; then spec 1; spec 3; run k3 --spec-draft-n-max 3; head -5 /tmp/err-k2.txt; fi
done
cmp /tmp/out-plain.txt /tmp/out-k2.txt && cmp /tmp/out-plain.txt /tmp/out-auto.txt && cmp /tmp/out-plain.txt /tmp/out-k2-no9.txt && echo "texts equal"
cp /tmp/err-k2.txt "$OUT/err-k2.txt"
echo "[$((SECONDS - T0))s] done"
