#!/usr/bin/env bash
# session 37 call 3 (fresh H200): is 0014 bit for bit? bench/logits_digest.py with GGML_CUDA_MMVQ_SHARE_Q8_1=1 and =0
# on the 9B shape (128 greedy tokens one row at a time, then the same tokens as 3-row verifies that roll one row
# back): equal files, equal logits. Then more rounds of llama-completion, `run` k=2 with the switch on and off.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-470} SHAPE=9b EXTRA_PATCH="0014"
source bench/reference/same-call-h200-9b-s28/common.sh
for s in 1 0; do
  GGML_CUDA_MMVQ_SHARE_Q8_1=$s timeout 90 python3 -m bench.logits_digest "$M" -ngl 99 -n 128 --out "$OUT/digest-share$s.json" \
    2>/tmp/dg-err.txt || tail -3 /tmp/dg-err.txt
done
cmp "$OUT/digest-share1.json" "$OUT/digest-share0.json" && echo "digest: the same logits with the switch on and off" \
  || echo "DIGEST DIFFERS"
grep -v '^  [0-9]' "$OUT/digest-share1.json" | tr -d '\n'; echo
echo "[$((SECONDS - T0))s] digests done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc
  run k2 --spec-draft-n-max 2; GGML_CUDA_MMVQ_SHARE_Q8_1=0 run k2-s0 --spec-draft-n-max 2
done
echo "[$((SECONDS - T0))s] done"
