#!/usr/bin/env bash
# the shipped patch set (0001, 0002); the 9B ~72% model with a 32k map; is a first answer as fast as later ones?
set -uo pipefail
[ -x /tmp/lcpp/bin/llama-completion ] && echo "build present (warm machine)" || echo "no build: a fresh machine"
DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -6
M=/tmp/gguf-mtp-bench/9b-32L-Q8_0-noise0.06-dv32768.gguf
cat "$M" > /dev/null
PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout 240 python3 -m bench.first_answer "$M" -ngl 99 -n 256 \
  --answers 3 --rows plain,2,auto --no-warmup-rows 2>&1 | tee "$OUT/first_answer.txt"
