#!/usr/bin/env bash
# session 19 GPU call 3: plain decoding against llama-completion on the 35B-A3B shape (Q4_K_M, 32k draft vocab)
set -uo pipefail
export GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 HEADS=noisy
T0=$SECONDS
BUDGET=1 DRAFTS="2" PERF= OUT=$OUT/shapes bash bench/gpu.sh shapes 35b-a3b:q4_k_m > $OUT/shapes.log 2>&1
echo "shapes done at $((SECONDS-T0)) s"; tail -4 $OUT/shapes.log
M=/tmp/gguf-mtp-bench/models-35b-a3b.txt; cat $M
N=$(grep -m1 -i "^35b-a3b q4_k_m, noisy head.*, draft vocab 32768=" $M)
left=$(( 590 - (SECONDS - T0) ))
PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout $left python3 -m bench.oneshot --bin /tmp/lcpp/bin --ngl 99 -n 256 \
    --model "$N" --drafts --plain-pairs ${PAIRS:-5} --out $OUT/pairs.json > $OUT/pairs.txt 2>&1
echo "pairs done at $((SECONDS-T0)) s"; tail -5 $OUT/pairs.txt
