#!/usr/bin/env bash
# session 25 call 1 (H200): where a step's host time goes on the shipped path (9B shape, Q8_0, ~70% head, 32k draft
# vocabulary, k=2 and plain): time inside llama_decode per context, waits, reads, seq_rm (bench.host_time), and
# native stacks of the step (py-spy --native). (As run, the call also loaded the file through the virtual FILE*; those
# processes crashed, a script importing numpy before llama.cpp: ../draft-vocab-load-h200-9b/ has them, from call 2.)
# The call ran first versions of bench/host_time.py and bench/native_stacks.py (the same timers and sums).
set -uo pipefail
T0=$SECONDS
left() { echo $(( 590 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | tail -12
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "model: $M ($(du -h "$M" | cut -f1)); $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
q() { grep -v "^llama\|^load\|^print_info\|^common\|^\s*$" ; }
for k in 2 0; do timeout $(left) python3 -m bench.host_time "$M" -k $k -n 256 2>&1 | q | tail -16 | tee -a $OUT/host.txt; done
echo "[$((SECONDS - T0))s] py-spy"
timeout $(left) /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o $OUT/spy-k2.txt -- \
  python3 -m bench.host_time "$M" -k 2 -n 512 > $OUT/spy-run.txt 2>&1
python3 -m bench.native_stacks $OUT/spy-k2.txt > $OUT/spy-k2-summary.txt 2>&1; head -60 $OUT/spy-k2-summary.txt
echo "[$((SECONDS - T0))s] done"
