#!/usr/bin/env bash
# session 29 call 2 (H200, a fresh machine): patch 0010 revised so the verify's wait for the drafts' token ids is
# queued by ggml's scheduler after the host has copied the verify's inputs (ggml_backend_sched_set_compute_wait),
# against the first version's wait queued before them (GGUF_MTP_EXT_WAIT_EARLY=1, where patch 0008's one input
# synchronization then waited for the last draft), alternating `run` k=2 processes, llama-completion in every round;
# bench.host_time at k=2 both ways once. The build: the shipped patches (0001, 0002, 0008, 0010).
rm -rf /tmp/lcpp /tmp/b  # never a build of another patch set left on a machine still held
export BUDGET_S=${BUDGET_S:-575} EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh  # (its copy of proposed/none-*.patch fails: none wanted)
run late-check --spec-draft-n-max 2; GGUF_MTP_EXT_WAIT_EARLY=1 run early-check --spec-draft-n-max 2
run plain --no-mtp
cmp /tmp/out-plain.txt /tmp/out-late-check.txt && cmp /tmp/out-plain.txt /tmp/out-early-check.txt && echo "check texts equal"
head -4 /tmp/err-late-check.txt
for i in $(seq 1 16); do
  [ "$(left)" -gt 30 ] || break
  run k2-late --spec-draft-n-max 2; GGUF_MTP_EXT_WAIT_EARLY=1 run k2-early --spec-draft-n-max 2; lc
  if [ "$i" = 3 ]; then
    for e in 0 1; do
      GGUF_MTP_EXT_WAIT_EARLY=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 | sed "s/^/early=$e   /" | head -9
    done
  fi
  if [ "$i" = 5 ]; then run auto-late; run k3-late --spec-draft-n-max 3; fi
done
cmp /tmp/out-plain.txt /tmp/out-k2-late.txt && cmp /tmp/out-plain.txt /tmp/out-k2-early.txt && echo "texts equal"
echo "[$((SECONDS - T0))s] done"
