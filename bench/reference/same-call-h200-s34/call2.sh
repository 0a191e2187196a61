#!/usr/bin/env bash
# session 34 call 2 (call 1's machine, still held: build reused; call 1's models removed for the disk): the 35B-A3B
# shape (Q4_K_M, ~83% head, 32k draft vocabulary): rounds of llama-completion, `run` k=2, auto, and k=2 with the head's
# MTP block and draft LM head at Q4_0 (sidecars.sh). Session 33: auto 0.942x of k=2 per round at the same length,
# its shadow steps rebuilding the verify's graph (fixed since).
rm -rf /tmp/gguf-mtp-bench
export BUDGET_S=${BUDGET_S:-480} SHAPE=35b-a3b TRUNK=q4_k_m EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s34/sidecars.sh
keep() {  # auto's own record of the row just run (step times at each length, runs, changes)
  python3 -c "import json,sys; s=json.load(open('/tmp/st.json')); print(json.dumps({'row': sys.argv[1], 'auto': s.get('auto')}))" \
    "$1" >> "$OUT/auto.jsonl"
}
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; run auto --spec-draft-n-max auto; keep auto; run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf
done
echo "[$((SECONDS - T0))s] done"
