#!/usr/bin/env bash
# session 33 call 3 (the same machine, still held: build reused; call 2's 27B model removed for the disk): the 9B
# shape (Q8_0, 32k draft vocabulary) with a ~70% head and with a head that is always right, for auto's bound
# (issue 24: auto within 95% of the best fixed k; session 32: perfect head k=3 2.47x, k=4 2.45x, k=6 2.70x, and
# auto stops at 4). Rounds of llama-completion, `run` auto and auto:8 with the ~70% head, and with the perfect head
# auto, auto:6, auto:8 and fixed k=6 and k=8.
rm -rf /tmp/gguf-mtp-bench
export BUDGET_S=${BUDGET_S:-450} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
M70=$M
keep() {  # auto's own record of the row just run (step times at each length, runs, changes)
  python3 -c "import json,sys; s=json.load(open('/tmp/st.json')); print(json.dumps({'row': sys.argv[1], 'auto': s.get('auto')}))" \
    "$1" >> "$OUT/auto.jsonl"
}
python3 -m bench.models --workdir /tmp/gguf-mtp-bench --shape 9b --trunks q8_0 --vocab 248320 --heads perfect \
  --draft-vocab 32768 --draft-vocab-only --manifest /tmp/gguf-mtp-bench/models-9b-perfect.txt > /tmp/perfect.log 2>&1 \
  || tail -5 /tmp/perfect.log
MP=$(grep -m1 -i "^9b q8_0, perfect head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b-perfect.txt | cut -d= -f2-)
echo "[$((SECONDS - T0))s] perfect model: $MP; $(left) s left"; cat "$MP" > /dev/null
for i in $(seq 1 30); do [ "$(left)" -gt 25 ] || break
  M=$M70; lc; run auto --spec-draft-n-max auto; keep auto; run auto8 --spec-draft-n-max auto:8; keep auto8
  M=$MP; run p-auto --spec-draft-n-max auto; keep p-auto; run p-auto6 --spec-draft-n-max auto:6; keep p-auto6
  run p-auto8 --spec-draft-n-max auto:8; keep p-auto8
  run p-k6 --spec-draft-n-max 6; run p-k8 --spec-draft-n-max 8
done
echo "[$((SECONDS - T0))s] done"
