#!/usr/bin/env bash
# session 34 call 3 (the same machine, build reused; call 2's model removed). First the 27B shape (Q8_0, 64 layers): a
# timeline of one k=2 answer and one plain answer (where a k=2 step's 1.35x a plain token goes: session 33), while
# the 9B shape's python stage is made in the background. Then the 9B shape (Q8_0, ~70% head, 32k draft vocabulary):
# rounds of llama-completion, `run` k=2 as shipped, and k=2 with the head in head-only sidecars re-encoded in the
# background (re-encoding takes minutes: rows join once their file is written): h4 (MTP block Q4_0) and h44 (MTP block
# and draft LM head Q4_0).
rm -rf /tmp/gguf-mtp-bench; mkdir -p /tmp/gguf-mtp-bench
T00=$SECONDS ALL=${ALL_S:-575}
(PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models --workdir /tmp/gguf-mtp-bench \
  --shape 9b --trunks q8_0 --vocab 248320 --heads noisy --draft-vocab-only --threads 6 > /tmp/m9.log 2>&1; echo rc=$? >> /tmp/m9.log) &
BG=$!
export BUDGET_S=250 SHAPE=27b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for k in 2 0; do LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k $k -n 64 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "$OUT/timeline-27b-k$k.txt"; head -8 "$OUT/timeline-27b-k$k.txt"; done
echo "[$((SECONDS - T00))s] 27B timelines done"
rm -rf /tmp/gguf-mtp-bench/*27b*
wait $BG; tail -2 /tmp/m9.log
export BUDGET_S=$(( ALL - (SECONDS - T00) )) SHAPE=9b
source bench/reference/same-call-h200-9b-s28/common.sh
rm -f /tmp/h4.gguf /tmp/h44.gguf
(for v in "h4 --mtp-type q4_0" "h44 --mtp-type q4_0 --draft-head-type q4_0"; do set -- $v; n=$1; shift
   python3 -m gguf_mtp_cli.main extract "$M" --head-only "$@" -o "/tmp/$n.gguf" -q; done > /tmp/hx.log 2>&1 &)
for i in $(seq 1 30); do [ "$(left)" -gt 35 ] || break
  lc; run k2 --spec-draft-n-max 2
  [ -s /tmp/h4.gguf ] && run k2-h4 --spec-draft-n-max 2 --mtp /tmp/h4.gguf
  [ -s /tmp/h44.gguf ] && run k2-h44 --spec-draft-n-max 2 --mtp /tmp/h44.gguf
done
cat /tmp/hx.log
echo "[$((SECONDS - T00))s] done"
