#!/usr/bin/env bash
# session 28 call 2 (call 1's machine, still held: its build and model reused): patch 0009's switch both ways in ten
# alternating pairs of `run` k=2, then bench.host_time at k=2 both ways (time inside llama_decode before the GPU
# starts).
BUDGET_S=585 EXTRA_PATCH=0009 source bench/reference/same-call-h200-9b-s28/common.sh
for i in $(seq 1 10); do
  [ "$(left)" -gt 60 ] || break
  run k2 --spec-draft-n-max 2; GGML_CUDA_GRAPH_REUSE_FAST_PATH=0 run k2-no9 --spec-draft-n-max 2
done
for e in 1 0; do
  GGML_CUDA_GRAPH_REUSE_FAST_PATH=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 | sed "s/^/fast=$e   /" | head -14
done
echo "[$((SECONDS - T0))s] done"
