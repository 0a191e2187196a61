#!/usr/bin/env bash
# session 39 call 2 (fresh H200): the shipped set on the 9B shape. (1) What a draft decode copies: a timeline of k=2
# whose copies carry their memory kinds and sizes (bench/gpu_timeline.py of this session). (2) A draft's time as
# `run --perf` measures it now that 0015 ships, with the head as shipped and re-encoded (h44: block and draft LM head
# Q4_0), two processes each. (3) 0015's prompt revision: `run` on a ~3.5k-token prompt, the switch on and =0,
# alternating. (4) Rounds of llama-completion, `run` k=2 and llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 --draft-head-type q4_0 -o /tmp/h44.gguf --force -q 2>&1 | tail -1
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
LD_PRELOAD=$STDCXX timeout 70 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 2>&1 \
  | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k2.txt"
sed -n '/decode\[mtp\] n=3: kernel/,/decode\[mtp\] n=419: kernel/p' "$OUT/timeline-9b-k2.txt" | grep -i "memcpy\|families"
echo "[$((SECONDS - T0))s] timeline done; $(left) s left"
for i in 1 2; do for s in ship h44; do
  extra=(); [ $s = h44 ] && extra=(--mtp /tmp/h44.gguf)
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --spec-draft-n-max 2 \
    "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
python3 - <<'PY'
import bench.llamacpp as l, pathlib
text = open("gguf_mtp/runtime/proposer.py").read() + open("gguf_mtp/runtime/speculative.py").read()
l.write_prompt(pathlib.Path("/tmp/long.txt"), "Explain this code.\n\n" + text[:4800])
PY
for i in 1 2 3; do for sw in 1 0; do
  GGUF_MTP_MTP_OUTPUT_ROWS=$sw timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/long.txt -n 16 -c 8192 -ngl 99 \
    --spec-draft-n-max 2 --stats-json /tmp/lp.json --force > /dev/null 2>/tmp/lp-err.txt || tail -2 /tmp/lp-err.txt
  [ -f /tmp/lp.json ] && python3 -c "import json; s = json.load(open('/tmp/lp.json')); print(json.dumps({'row': 'long-r$sw', 'prompt_tokens': s.get('prompt_tokens'), 'prompt_tps': s.get('prompt_tps')}))" | tee -a "$OUT/long.jsonl"
  rm -f /tmp/lp.json
done; done
echo "[$((SECONDS - T0))s] long prompts done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 spec2
echo "[$((SECONDS - T0))s] done"
