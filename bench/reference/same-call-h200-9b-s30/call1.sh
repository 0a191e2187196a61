#!/usr/bin/env bash
# session 30 call 1 (H200, a fresh machine; the shipped patches 0001, 0002, 0008, 0010): the head's decode queued
# behind the verify and fed from its rows on the device (GGUF_MTP_DEVICE_FEED=1) against the host feed (=0),
# alternating `run` processes at k=2 and k=1, llama-completion in every round; the verify with and without the
# device ids' gather timed once each under --perf (it waits after every decode); bench.host_time at k=2 both ways.
rm -rf /tmp/lcpp /tmp/b  # never a build of another patch set left on a machine still held
export BUDGET_S=${BUDGET_S:-585} EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh
GGUF_MTP_DEVICE_FEED=1 run k2-feed-check --spec-draft-n-max 2; GGUF_MTP_DEVICE_FEED=1 run k1-feed-check --spec-draft-n-max 1
run plain --no-mtp
cmp /tmp/out-plain.txt /tmp/out-k2-feed-check.txt && cmp /tmp/out-plain.txt /tmp/out-k1-feed-check.txt && echo "check texts equal"
head -5 /tmp/err-k2-feed-check.txt
for t in 1 0; do
  GGUF_MTP_DEVICE_TOKENS=$t run perf-tokens$t --spec-draft-n-max 2 --perf
  python3 -c "import json; s=json.load(open('/tmp/st.json')); print('device tokens $t', json.dumps(s.get('breakdown')))"
  tail -1 /tmp/err-perf-tokens$t.txt
done
for i in $(seq 1 30); do
  [ "$(left)" -gt 28 ] || break
  GGUF_MTP_DEVICE_FEED=1 run k2-feed --spec-draft-n-max 2; GGUF_MTP_DEVICE_FEED=0 run k2-host --spec-draft-n-max 2; lc
  GGUF_MTP_DEVICE_FEED=1 run k1-feed --spec-draft-n-max 1; GGUF_MTP_DEVICE_FEED=0 run k1-host --spec-draft-n-max 1
  if [ "$i" = 2 ]; then
    for e in 0 1; do
      GGUF_MTP_DEVICE_FEED=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 | sed "s/^/feed=$e   /" | head -12
    done
  fi
done
for r in k2-feed k2-host k1-feed k1-host; do cmp /tmp/out-plain.txt /tmp/out-$r.txt || echo "TEXT DIFFERS: $r"; done
echo "[$((SECONDS - T0))s] done"
