#!/usr/bin/env bash
# session 31 call 3 (call 2's machine, still held: build and model reused; the command was given inline, kept here
# as it ran): rounds of `run` k=2, llama-completion and `run --no-mtp`, with llama.cpp's MTP k=2 and `run` k=3 every
# third round, in what was left of the session's device time.
export BUDGET_S=470 EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 30); do [ "$(left)" -gt 20 ] || break
  run k2 --spec-draft-n-max 2; lc; run plain --no-mtp
  if [ $((i % 3)) = 1 ]; then spec 2; run k3 --spec-draft-n-max 3; fi
done
echo "[$((SECONDS - T0))s] done"
