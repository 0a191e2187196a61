#!/usr/bin/env bash
# session 40 call 3 (fresh H200): patch 0008's GGML_SCHED_ASYNC_INPUTS=2 (the host waits for a split's input copies
# after launching its compute, not before) against =1 (gguf-mtp's setting until now), on the 9B shape with the
# shipped set. (1) A traced k=2 answer with =2, one draft decode listed with its host's CUDA calls (the wait should
# now follow the graph's launch). (2) `run --perf` as shipped and with the drafts' LM head at Q4_0 (hq4), =1 and =2.
# (3) Rounds of llama-completion (stock, and with =2), `run` k=2 with =1 and =2, and llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-550} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --draft-head-type q4_0 -o /tmp/hq4.gguf --force -q 2>&1 | tail -1
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
GGML_SCHED_ASYNC_INPUTS=2 LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 \
  --sequence 'decode[mtp] n=3' 2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k2-a2.txt"
grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-9b-k2-a2.txt"
awk '/CUDA API calls on the host/{p=1} p' "$OUT/timeline-9b-k2-a2.txt" | head -16
echo "[$((SECONDS - T0))s] timeline done; $(left) s left"
for s in ship hq4; do for a in 1 2; do
  extra=(); [ $s = hq4 ] && extra=(--mtp /tmp/hq4.gguf)
  GGML_SCHED_ASYNC_INPUTS=$a timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    --spec-draft-n-max 2 "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s-a$a', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
lcx() {  # $1: label; llama-completion under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc.txt 2>&1
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; GGML_SCHED_ASYNC_INPUTS=2 lcx lc-a2; GGML_SCHED_ASYNC_INPUTS=1 run k2 --spec-draft-n-max 2
  GGML_SCHED_ASYNC_INPUTS=2 run k2-a2 --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2-a2 k2 --versus lc-a2 lc --versus k2 spec2 --versus k2-a2 spec2
echo "[$((SECONDS - T0))s] done"
