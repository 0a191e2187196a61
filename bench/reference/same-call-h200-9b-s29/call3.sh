#!/usr/bin/env bash
# session 29 call 3 (call 2's machine, still held: build and model reused): more alternating rounds of call 2's A/B
# (the wait queued after the inputs against GGUF_MTP_EXT_WAIT_EARLY=1) with llama-completion, in what was left of
# the session's device time.
export BUDGET_S=${BUDGET_S:-300} EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh  # (its copy of proposed/none-*.patch fails: none wanted)
for i in $(seq 1 20); do
  [ "$(left)" -gt 22 ] || break
  run k2-late --spec-draft-n-max 2; GGUF_MTP_EXT_WAIT_EARLY=1 run k2-early --spec-draft-n-max 2; lc
done
cmp /tmp/out-k2-early.txt /tmp/out-k2-late.txt && echo "texts equal"
