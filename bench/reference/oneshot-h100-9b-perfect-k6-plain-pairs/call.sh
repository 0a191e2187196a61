#!/usr/bin/env bash
# session 19 GPU call: perfect head at k=4..6, plain pairs on the ~72% head (9B shape, Q8_0, 32k draft vocab)
set -uo pipefail
export GGUF_MTP_PATCHES=${GGUF_MTP_PATCHES:-proposed} DRAFT_VOCAB=32768 DV_ONLY=1 HEADS="perfect noisy"
T0=$SECONDS
# build + models; BUDGET=1 stops shapes' own rows at once
BUDGET=1 DRAFTS="4" PERF= OUT=$OUT/shapes bash bench/gpu.sh shapes 9b:q8_0 > $OUT/shapes.log 2>&1
echo "shapes done at $((SECONDS-T0)) s"; tail -3 $OUT/shapes.log
M=/tmp/gguf-mtp-bench/models-9b.txt; cat $M
P=$(grep -m1 -i "^9b q8_0, perfect head.*, draft vocab 32768=" $M)
N=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" $M)
os() { PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout $1 python3 -m bench.oneshot --bin /tmp/lcpp/bin --ngl 99 -n 256 "${@:2}"; }
os 200 --model "$P" --drafts 4 5 6 --spec-drafts 4 5 --out $OUT/perfect.json 2>&1 | tail -25 > $OUT/perfect.txt
echo "perfect done at $((SECONDS-T0)) s"; cat $OUT/perfect.txt
left=$(( 585 - (SECONDS - T0) ))
os $left --model "$N" --drafts --plain-pairs ${PAIRS:-4} --out $OUT/pairs.json > $OUT/pairs.txt 2>&1
echo "pairs done at $((SECONDS-T0)) s"; tail -5 $OUT/pairs.txt
