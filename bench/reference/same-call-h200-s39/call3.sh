#!/usr/bin/env bash
# session 39 call 3 (fresh H200): the shipped set plus proposed 0017 (sampled-ids-only) on the 9B shape: a row whose
# token the backend sampler picked copies only its id, not its 993 KB logits row. (1) Timelines of k=2 with the switch
# on and =0 (each decode's copies). (2) `run --perf` with the head as shipped and re-encoded (h44), switch on. (3)
# Rounds of llama-completion, `run` k=2 on and =0, and llama.cpp's own MTP k=2.
# (0017 was proposed then and is shipped since: run it with EXTRA_PATCH=none now.)
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-510} SHAPE=9b EXTRA_PATCH="0017"
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 --draft-head-type q4_0 -o /tmp/h44.gguf --force -q 2>&1 | tail -1
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for sw in 1 0; do
  GGUF_MTP_SAMPLED_IDS_ONLY=$sw LD_PRELOAD=$STDCXX timeout 70 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k2-ids$sw.txt"
  grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-9b-k2-ids$sw.txt"; grep -c "993280" "$OUT/timeline-9b-k2-ids$sw.txt"
done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for s in ship h44; do
  extra=(); [ $s = h44 ] && extra=(--mtp /tmp/h44.gguf)
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --spec-draft-n-max 2 \
    "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; GGUF_MTP_SAMPLED_IDS_ONLY=0 run k2-i0 --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 k2-i0 --versus k2 spec2 --versus k2-i0 spec2
echo "[$((SECONDS - T0))s] done"
