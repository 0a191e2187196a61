#!/usr/bin/env bash
# session 34 call 3 (the same machine, build reused; call 2's model removed): the 27B shape (Q8_0, 64 layers): a
# timeline of one k=2 answer and one plain answer (where a k=2 step's 1.35x a plain token goes: session 33), then
# rounds of llama-completion, `run` k=2, auto, and k=2 with the head's MTP block and draft LM head at Q4_0.
rm -rf /tmp/gguf-mtp-bench
export BUDGET_S=${BUDGET_S:-500} SHAPE=27b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s34/sidecars.sh
keep() {  # auto's own record of the row just run (step times at each length, runs, changes)
  python3 -c "import json,sys; s=json.load(open('/tmp/st.json')); print(json.dumps({'row': sys.argv[1], 'auto': s.get('auto')}))" \
    "$1" >> "$OUT/auto.jsonl"
}
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for k in 2 0; do LD_PRELOAD=$STDCXX timeout 100 python3 -m bench.gpu_timeline "$M" -k $k -n 64 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "$OUT/timeline-27b-k$k.txt"; head -12 "$OUT/timeline-27b-k$k.txt"; done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for i in $(seq 1 30); do [ "$(left)" -gt 45 ] || break
  lc; run k2 --spec-draft-n-max 2; run auto --spec-draft-n-max auto; keep auto; run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf
done
echo "[$((SECONDS - T0))s] done"
