#!/usr/bin/env bash
# session 38 call 1 (fresh H200): the shipped set, 0014 included, on the 9B shape (Q8_0 trunk, ~70% head, 32k draft
# vocabulary). (1) What a draft costs now: timelines of k=2 with the head as shipped (h8: block Q8_0, the drafts
# reading 32k rows of the Q8_0 LM head) and re-encoded (sidecars.sh of session 34: h54 block Q5_0 and h44 block Q4_0,
# each with a Q4_0 draft LM head), every kernel family and the idle inside a draft's span; and one `run --perf`
# answer each (the per-draft time as the breakdown measures it, a wait after every decode). (2) Rounds of
# llama-completion, `run` k=2, `run` k=2 with h44, llama.cpp's own MTP k=2 in every round, auto every third round.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s34/sidecars.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for s in h8 h54 h44; do
  LD_PRELOAD=$STDCXX timeout 60 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --mtp /tmp/$s.gguf --top 16 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "$OUT/timeline-9b-k2-$s.txt"
  grep -m3 "^k=2\|decode\[mtp\]\|decode\[tgt\]" "$OUT/timeline-9b-k2-$s.txt"
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --spec-draft-n-max 2 \
    --mtp /tmp/$s.gguf --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lc; run k2 --spec-draft-n-max 2; spec 2; run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf
  [ $((i % 3)) = 1 ] && run auto --spec-draft-n-max auto
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 spec2 --versus k2-h44 k2 --versus auto k2
echo "[$((SECONDS - T0))s] done"
