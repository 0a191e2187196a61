#!/usr/bin/env bash
# session 19 GPU call 5: plain decoding one step ahead (GGUF_MTP_PIPELINE) against llama-completion, 35B-A3B shape
set -uo pipefail
export GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 HEADS=noisy
T0=$SECONDS
BUDGET=1 DRAFTS="2" PERF= OUT=$OUT/shapes bash bench/gpu.sh shapes 35b-a3b:q4_k_m > $OUT/shapes.log 2>&1
echo "shapes done at $((SECONDS-T0)) s"; grep -E "built|reused" $OUT/shapes.log
M=/tmp/gguf-mtp-bench/models-35b-a3b.txt
N=$(grep -m1 -i "^35b-a3b q4_k_m, noisy head.*, draft vocab 32768=" $M)
os() { PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout $1 python3 -m bench.oneshot --bin /tmp/lcpp/bin --ngl 99 -n 256 --model "$N" --drafts "${@:2}"; }
for pl in 1 0; do
    left=$(( (590 - (SECONDS - T0)) / (pl + 1) ))
    GGUF_MTP_PIPELINE=$pl os $left --plain-pairs ${PAIRS:-4} --out $OUT/pairs-pipeline$pl.json > $OUT/pairs-pipeline$pl.txt 2>&1
    echo "pipeline=$pl done at $((SECONDS-T0)) s"; head -1 $OUT/pairs-pipeline$pl.txt
done
