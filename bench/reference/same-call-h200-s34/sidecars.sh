#!/usr/bin/env bash
# Sourced after common.sh: head-only sidecars of $M's own head (its ~70% draft LM head and 32k draft vocabulary kept),
# as shipped (Q8_0) and re-encoded: the MTP block at Q4_0 or Q5_0 with the draft LM head at Q4_0 (`gguf-mtp extract
# --head-only --mtp-type T --draft-head-type q4_0`). `run --mtp SIDECAR` takes one in place of the bundled head, so
# every variant runs on the same trunk file.
for v in "h8" "h44 --mtp-type q4_0 --draft-head-type q4_0" "h54 --mtp-type q5_0 --draft-head-type q4_0"; do
  set -- $v; name=$1; shift
  python3 -m gguf_mtp_cli.main extract "$M" --head-only "$@" -o "/tmp/$name.gguf" --force -q 2>&1 | tail -1
done
ls -la /tmp/h8.gguf /tmp/h44.gguf /tmp/h54.gguf | awk '{print $5, $9}'
