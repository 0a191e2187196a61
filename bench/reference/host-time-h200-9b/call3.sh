#!/usr/bin/env bash
# session 25 call 3 (H200): the step's sampling reads with and without this session's read-only path (host.py,
# in-process); where a plain decode's host time goes (py-spy --native, and host sampling as llama-completion does);
# then the release rows once more with the current code (llama-completion, llama.cpp's MTP k=2, run --no-mtp and
# run k=2, three processes a run row). The call ran first versions of bench/host_time.py and bench/native_stacks.py.
set -uo pipefail
T0=$SECONDS
left() { echo $(( 590 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error" | tail -4
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "model: $M; $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
q() { grep -v "^llama\|^load\|^print_info\|^common\|^\s*$" ; }
for v in "-k 2" "-k 2 --variant ro0" "-k 2" "-k 2 --variant ro0" "-k 0" "-k 0 --variant hostsamp"; do
  timeout $(left) python3 -m bench.host_time "$M" -n 256 $v 2>&1 | q | tail -14 | tee -a $OUT/host.txt
done
echo "[$((SECONDS - T0))s] py-spy, plain"
timeout $(left) /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o /tmp/spy-k0.txt -- \
  python3 -m bench.host_time "$M" -k 0 -n 512 > $OUT/spy-run.txt 2>&1
gzip -c /tmp/spy-k0.txt > $OUT/spy-k0.txt.gz
python3 -m bench.native_stacks /tmp/spy-k0.txt > $OUT/spy-k0-summary.txt 2>&1
sed -n '/== llama_context::decode/,/== llama_batch_compat/p' $OUT/spy-k0-summary.txt | head -75
echo "[$((SECONDS - T0))s] one-shot rows, $(left) s left"
timeout $(( $(left) - 5 )) python3 -m bench.oneshot --model "9b Q8_0, noisy head, draft vocab 32768=$M" \
  --bin /tmp/lcpp/bin --ngl 99 -n 256 --drafts 2 --repeat 3 --out $OUT/oneshot.json 2>&1 | tail -12 | tee $OUT/oneshot.txt
echo "[$((SECONDS - T0))s] done"
