#!/usr/bin/env bash
# session 41 call 1 (fresh H200): proposed patch 0018 (mtp-self-feed) on top of the shipped set, 9B shape. (1) A traced
# k=2 answer with GGUF_MTP_SELF_FEED=1, one draft decode listed with its host's CUDA calls (the second draft's launch
# should no longer wait for the first's result). (2) `run --perf` as shipped and with the drafts' LM head at Q4_0 (hq4),
# self-feed off and on. (3) Rounds of llama-completion, `run` k=2 host-fed and self-fed, llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-515} SHAPE=9b EXTRA_PATCH="0018"
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --draft-head-type q4_0 -o /tmp/hq4.gguf --force -q 2>&1 | tail -1
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
GGUF_MTP_SELF_FEED=1 LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 \
  --sequence 'decode[mtp] n=3' 2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-k2-sf.txt"
grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-k2-sf.txt"
echo "[$((SECONDS - T0))s] timeline done; $(left) s left"
for s in ship hq4; do for sf in 0 1; do
  extra=(); [ $s = hq4 ] && extra=(--mtp /tmp/hq4.gguf)
  GGUF_MTP_SELF_FEED=$sf timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    --spec-draft-n-max 2 "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s-sf$sf', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
  grep -h "MTP:" /tmp/perf-err.txt | head -1
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; GGUF_MTP_SELF_FEED=1 run k2-sf --spec-draft-n-max 2
  GGUF_MTP_SELF_FEED=1 run k2-sf-hq4 --spec-draft-n-max 2 --mtp /tmp/hq4.gguf; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2-sf k2 --versus k2-sf spec2 --versus k2 spec2 --versus k2-sf-hq4 k2-sf --versus k2-sf lc
echo "[$((SECONDS - T0))s] done"
