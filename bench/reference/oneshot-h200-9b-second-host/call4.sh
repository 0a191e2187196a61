#!/usr/bin/env bash
# session 25 call 4 (H200, the machine of call 3 still warm: its build and model reused): llama.cpp's MTP at
# k = 1..3 and in alternating processes against run k=2, on the file of call 3
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
timeout 290 python3 -m bench.oneshot --model "9b Q8_0, noisy head, draft vocab 32768=$M" --bin /tmp/lcpp/bin \
  --ngl 99 -n 256 --drafts 2 --spec-drafts 1 2 3 --repeat 3 --ab - - --ab-rows spec,best --ab-n 2 \
  --out $OUT/oneshot.json 2>&1 | tail -16
