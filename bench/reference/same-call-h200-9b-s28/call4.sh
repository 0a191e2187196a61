#!/usr/bin/env bash
# session 28 call 4 (H200, a fresh machine): patch 0010-device-draft-tokens (then proposed), `run` k=2 with the last
# draft verified from the device (the default where the patch is loaded) against read back first
# (GGUF_MTP_DEVICE_TOKENS=0), alternating, with llama-completion in every round (the same-call baseline); auto both
# ways and llama.cpp's MTP k=2 once; bench.host_time at k=2 both ways once. The build: the shipped patches (0001,
# 0002, 0008) plus 0010.
BUDGET_S=${BUDGET_S:-575} EXTRA_PATCH=0010 source bench/reference/same-call-h200-9b-s28/common.sh
# the run must work with the patch before the A/B: one process each way, texts compared
run dev-check --spec-draft-n-max 2; GGUF_MTP_DEVICE_TOKENS=0 run host-check --spec-draft-n-max 2
run plain --no-mtp
cmp /tmp/out-plain.txt /tmp/out-dev-check.txt && cmp /tmp/out-plain.txt /tmp/out-host-check.txt && echo "check texts equal"
head -4 /tmp/err-dev-check.txt
for i in $(seq 1 14); do
  [ "$(left)" -gt 40 ] || break
  run k2-dev --spec-draft-n-max 2; GGUF_MTP_DEVICE_TOKENS=0 run k2-host --spec-draft-n-max 2; lc
  if [ "$i" = 2 ]; then run auto-dev; GGUF_MTP_DEVICE_TOKENS=0 run auto-host; spec 2; fi
  if [ "$i" = 4 ]; then
    for e in 1 0; do
      GGUF_MTP_DEVICE_TOKENS=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 | sed "s/^/devtok=$e   /" | head -9
    done
  fi
done
cmp /tmp/out-plain.txt /tmp/out-k2-dev.txt && cmp /tmp/out-plain.txt /tmp/out-k2-host.txt && echo "texts equal"
echo "[$((SECONDS - T0))s] done"
