#!/usr/bin/env bash
# session 36 call 3 (fresh H200): the shipped patches plus proposed 0007 (delta-net-conv-snapshots: a decode shorter
# than n_rs_seq + 1 writes only the conv-state snapshots a rollback can read). auto keeps n_rs_seq = its bound (6), so
# each of its verifies of 3-4 tokens wrote 7 conv snapshots a DeltaNet layer (24 layers), 3-4 with 0007; a fixed k=2
# keeps 2 and its verifies are 3 long, so 0007 changes nothing there (the control). Rounds: llama-completion, `run`
# k=2, auto with 0007 and auto with every snapshot written (GGUF_MTP_CONV_SNAPSHOTS=all, the stock path; the two in
# alternating order), llama.cpp's MTP k=2 every third round.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-560} SHAPE=9b EXTRA_PATCH="0007"
source bench/reference/same-call-h200-9b-s28/common.sh
echo "[$((SECONDS - T0))s] $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lc; run k2 --spec-draft-n-max 2
  if [ $((i % 2)) = 1 ]; then
    run auto --spec-draft-n-max auto; GGUF_MTP_CONV_SNAPSHOTS=all run auto-all --spec-draft-n-max auto
  else
    GGUF_MTP_CONV_SNAPSHOTS=all run auto-all --spec-draft-n-max auto; run auto --spec-draft-n-max auto
  fi
  [ $((i % 3)) = 1 ] && spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
echo "[$((SECONDS - T0))s] done"
