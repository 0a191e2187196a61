#!/usr/bin/env bash
# session 30 call 3 (call 2's machine, still held: build and model reused; the command was given inline, kept here
# as it ran): rounds of `run` k=2 and llama-completion, with `run` auto, llama.cpp's MTP k=2 and `run` k=3 once each,
# in what was left of the session's device time.
export BUDGET_S=470 EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh
echo "nsys: $(command -v nsys ncu nsight-sys 2>&1 | head -2)"
for i in $(seq 1 30); do
  [ "$(left)" -gt 15 ] || break
  run k2 --spec-draft-n-max 2; lc
  if [ "$i" = 4 ]; then run auto; spec 2; run k3 --spec-draft-n-max 3; fi
done
echo "[$((SECONDS - T0))s] done"
