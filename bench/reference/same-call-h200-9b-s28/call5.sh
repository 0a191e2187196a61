#!/usr/bin/env bash
# session 28 call 5 (call 4's machine, still held: build and model reused): eight more alternating pairs of call 4's
# A/B, with what was left of the session's device time.
BUDGET_S=${BUDGET_S:-140} EXTRA_PATCH=0010 source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 8); do
  [ "$(left)" -gt 22 ] || break
  run k2-dev --spec-draft-n-max 2; GGUF_MTP_DEVICE_TOKENS=0 run k2-host --spec-draft-n-max 2
done
