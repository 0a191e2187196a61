#!/usr/bin/env bash
# session 35 call 3 (a fresh H200): the shipped patches only, the 9B shape (Q8_0, ~70% head, 32k draft vocabulary):
# llama-completion, llama.cpp's own MTP at k=2 (its best on this file in sessions 31-32), `run` k=2 as shipped, and
# k=2 with the head's MTP block at Q4_0 (a head-only sidecar, `extract --head-only --mtp-type q4_0`, made in the
# background), in every round: issue 25's 1.6x and 1.3x on one more host.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-555} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
rm -f /tmp/h4.gguf
(python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 -o /tmp/h4.gguf -q > /tmp/hx.log 2>&1 &)
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lc; spec 2; run k2 --spec-draft-n-max 2
  [ -s /tmp/h4.gguf ] && run k2-h4 --spec-draft-n-max 2 --mtp /tmp/h4.gguf
done
cat /tmp/hx.log
grep -h "MTP:\|llama.cpp patches" /tmp/err-k2*.txt | sort | uniq -c
echo "[$((SECONDS - T0))s] done"
