#!/usr/bin/env bash
# session 34 call 1 (fresh H200): the 9B shape (Q8_0 trunk, ~70% head, 32k draft vocabulary) with its head as shipped
# (bundled, and the same head as a head-only sidecar) and re-encoded in sidecars (sidecars.sh: MTP block Q4_0 or
# Q5_0, draft LM head Q4_0): a timeline of k=2 with the shipped and the Q4_0 sidecar (a draft's GPU time: issue 25's
# 0.25 ms), then rounds of llama-completion and `run` k=2 with each.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-580} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s34/sidecars.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for s in h8 h44; do
  LD_PRELOAD=$STDCXX timeout 60 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --mtp /tmp/$s.gguf 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "$OUT/timeline-9b-k2-$s.txt"
  grep -m3 "^k=2\|decode\[mtp\]\|decode\[tgt\]" "$OUT/timeline-9b-k2-$s.txt"
done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for i in $(seq 1 30); do [ "$(left)" -gt 45 ] || break
  lc; run k2 --spec-draft-n-max 2; run k2-h8 --spec-draft-n-max 2 --mtp /tmp/h8.gguf
  run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf; run k2-h54 --spec-draft-n-max 2 --mtp /tmp/h54.gguf
done
echo "[$((SECONDS - T0))s] done"
