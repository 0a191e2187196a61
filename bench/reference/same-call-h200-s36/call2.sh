#!/usr/bin/env bash
# session 36 call 2 (call 1's machine, still held: build, model and /tmp/site-old reused): more rounds of call 1's.
export BUDGET_S=${BUDGET_S:-560} SHAPE=9b EXTRA_PATCH="0004 0009"
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s36/rows.sh
rounds
echo "[$((SECONDS - T0))s] done"
