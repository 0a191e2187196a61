#!/usr/bin/env bash
# session 29 call 1 (H200, a fresh machine): the proposed 0004-mtp-draft-chain on top of the shipped patches (0001,
# 0002, 0008, 0010), so the k drafts of a step run as one decode and the verify takes all k ids on the device (the
# host waits once a step). `run` k=2 chained (GGUF_MTP_DRAFT_CHAIN=1, the default where 0004 is loaded) against one
# decode a draft (=0; the last draft still from the device), alternating, llama-completion in every round; k=3 and
# auto both ways and llama.cpp's MTP k=2 once; bench.host_time at k=2 both ways once.
export BUDGET_S=${BUDGET_S:-575} EXTRA_PATCH=0004; source bench/reference/same-call-h200-9b-s28/common.sh
run chain-check --spec-draft-n-max 2; GGUF_MTP_DRAFT_CHAIN=0 run sep-check --spec-draft-n-max 2
run plain --no-mtp
cmp /tmp/out-plain.txt /tmp/out-chain-check.txt && cmp /tmp/out-plain.txt /tmp/out-sep-check.txt && echo "check texts equal"
head -4 /tmp/err-chain-check.txt
for i in $(seq 1 14); do
  [ "$(left)" -gt 30 ] || break
  run k2-chain --spec-draft-n-max 2; GGUF_MTP_DRAFT_CHAIN=0 run k2-sep --spec-draft-n-max 2; lc
  if [ "$i" = 2 ]; then
    run k3-chain --spec-draft-n-max 3; GGUF_MTP_DRAFT_CHAIN=0 run k3-sep --spec-draft-n-max 3
    run auto-chain; GGUF_MTP_DRAFT_CHAIN=0 run auto-sep; spec 2
  fi
  if [ "$i" = 4 ]; then
    for e in 1 0; do
      GGUF_MTP_DRAFT_CHAIN=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 | sed "s/^/chain=$e   /" | head -12
    done
  fi
done
cmp /tmp/out-plain.txt /tmp/out-k2-chain.txt && cmp /tmp/out-plain.txt /tmp/out-k2-sep.txt && echo "texts equal"
echo "[$((SECONDS - T0))s] done"
