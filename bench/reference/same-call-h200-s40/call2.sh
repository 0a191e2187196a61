#!/usr/bin/env bash
# session 40 call 2 (fresh H200): where a draft decode's host time goes, on the 9B shape with the shipped set. (1) A
# traced k=2 answer whose listing of one draft decode and one verify (`--sequence`) now also gives the CUDA API calls
# the host made inside each, from the call's start (the copies, the synchronisation, the graph's launch: the 57 us the
# GPU idles in a draft decode between its input copies and its first kernel); the trace itself is kept. (2) Rounds of
# llama-completion, `run` k=2 and llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-515} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 --trace "$OUT/trace-9b-k2.json.gz" \
  --sequence 'decode[mtp] n=3' --sequence 'decode[tgt] n=3' 2>&1 \
  | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k2-host.txt"
grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-9b-k2-host.txt"
awk '/CUDA API calls on the host/{p=1} p' "$OUT/timeline-9b-k2-host.txt" | head -60
ls -la "$OUT/trace-9b-k2.json.gz"
echo "[$((SECONDS - T0))s] timeline done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 spec2 --versus k2 lc
echo "[$((SECONDS - T0))s] done"
