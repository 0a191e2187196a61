#!/usr/bin/env bash
# session 38 call 2 (fresh H200): the shipped set plus proposed 0015 (mtp-output-rows: the head's block past the
# attention on its output rows alone; GGUF_MTP_MTP_OUTPUT_ROWS, which gguf-mtp sets where the marker is, and then
# asks for the head's hidden rows masked), the 9B shape. (1) What a draft costs with the switch on and =0: timelines
# of k=2 with the head as shipped (h8) and with h44, every kernel family. (2) Rounds: llama-completion, `run` k=2 on
# and =0, llama.cpp's own MTP k=2, `run` k=2 with h44; every gguf-mtp row records its tokens' hash (the rows must
# print the same tokens: the target verifies every draft).
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=9b EXTRA_PATCH="0015"
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s34/sidecars.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for s in h8 h44; do for sw in 1 0; do
  GGUF_MTP_MTP_OUTPUT_ROWS=$sw LD_PRELOAD=$STDCXX timeout 60 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 \
    --mtp /tmp/$s.gguf --top 16 2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info" > "$OUT/timeline-9b-k2-$s-rows$sw.txt"
  grep -m3 "^k=2\|decode\[mtp\]\|decode\[tgt\]" "$OUT/timeline-9b-k2-$s-rows$sw.txt"
done; done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lc; run k2 --spec-draft-n-max 2; GGUF_MTP_MTP_OUTPUT_ROWS=0 run k2-r0 --spec-draft-n-max 2; spec 2
  run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 k2-r0 --versus k2 spec2 --versus k2-h44 k2
echo "[$((SECONDS - T0))s] done"
