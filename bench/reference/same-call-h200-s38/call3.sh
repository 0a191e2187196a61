#!/usr/bin/env bash
# session 38 call 3 (fresh H200): the shipped set plus proposed 0015 (mtp-output-rows) on the 35B-A3B shape (the MoE,
# Q4_K_M, ~80% head, 32k draft vocabulary), where a padded draft decode's extra rows also route to experts of their
# own: a timeline of k=2 with the switch on and =0 (a draft's GPU work), then rounds of llama-completion, `run` k=2
# on and =0, and llama.cpp's own MTP k=2 every other round.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-520} SHAPE=35b-a3b TRUNK=q4_k_m EXTRA_PATCH="0015"
source bench/reference/same-call-h200-9b-s28/common.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for sw in 1 0; do
  GGUF_MTP_MTP_OUTPUT_ROWS=$sw LD_PRELOAD=$STDCXX timeout 70 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 16 \
    2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-35b-k2-rows$sw.txt"
  grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-35b-k2-rows$sw.txt"
done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for i in $(seq 1 30); do [ "$(left)" -gt 35 ] || break
  lc; run k2 --spec-draft-n-max 2; GGUF_MTP_MTP_OUTPUT_ROWS=0 run k2-r0 --spec-draft-n-max 2
  [ $((i % 2)) = 1 ] && spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 k2-r0 --versus k2 spec2
echo "[$((SECONDS - T0))s] done"
