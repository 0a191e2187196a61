#!/usr/bin/env bash
# session 35 call 1 (fresh H200): the 9B shape (Q8_0, ~70% head, 32k draft vocabulary) on the shipped patches plus
# proposed 0004 (a step's drafts in one decode) and 0009 (ggml-cuda's reused graph skips its per-node walk). Both were
# measured level before two later changes: 0011 (the device sampler's argmax over the full row 8x faster) and 0010's
# deferred wait (the verify's host work no longer waits for the drafts). The same holds for the head's decode queued
# behind the verify (GGUF_MTP_DEVICE_FEED=1, 3.7% slower in session 30, when each of its k + 1 rows paid the slow
# argmax). So: one process each of `bench.host_time -k 2` (a step's time and its host parts) for the shipped path
# (chain off), the feed and the chain, then rounds of llama-completion and `run` k=2 in those three ways and with
# the fast path off (GGML_CUDA_GRAPH_REUSE_FAST_PATH=0; the others have it on).
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-585} SHAPE=9b EXTRA_PATCH="0004 0009"
source bench/reference/same-call-h200-9b-s28/common.sh
for v in "ship GGUF_MTP_DRAFT_CHAIN=0" "feed GGUF_MTP_DRAFT_CHAIN=0 GGUF_MTP_DEVICE_FEED=1" "chain GGUF_MTP_DRAFT_CHAIN=1"; do
  set -- $v; n=$1; shift
  env "$@" timeout 60 python3 -m bench.host_time "$M" -k 2 -n 256 2>&1 | grep -v "^llama\|^load\|^print_info" \
    > "$OUT/host-9b-$n.txt"; head -12 "$OUT/host-9b-$n.txt"
done
echo "[$((SECONDS - T0))s] host times done; $(left) s left"
source bench/reference/same-call-h200-s35/rows.sh
rounds
echo "[$((SECONDS - T0))s] done"
