#!/usr/bin/env bash
# session 25 call 2 (H200): run --draft-vocab through the virtual FILE* (this session's read path, and the one before)
# against the same file mmapped with the same map: load time, host memory, t/s; then native stacks of the k=2 step
# once more, deeper inside ggml_backend_sched_graph_compute_async (py-spy --native). The call ran first versions of
# bench/virtual_load.py (the same rows, virtual.py before this session copied in by hand), bench/host_time.py and
# bench/native_stacks.py.
set -uo pipefail
T0=$SECONDS
left() { echo $(( 590 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error" | tail -4
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "model: $M ($(stat -c %s "$M") bytes, $(du -h "$M" | cut -f1) on disk); $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
echo "[$((SECONDS - T0))s] dvload"
# the read path before this session, made here beforehand (the device gets no git history; .carry travels):
#   git show 0fcd15b:gguf_mtp/runtime/virtual.py | sed 's/^from \.\./from gguf_mtp./' > .carry/virtual_old.py
timeout $(( $(left) - 120 )) python3 -m bench.virtual_load "$M" --rows mmap,virtual --old-virtual .carry/virtual_old.py \
  --repeat 2 2>&1 | tee -a $OUT/dvload.jsonl
echo "[$((SECONDS - T0))s] py-spy"
timeout $(left) /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o /tmp/spy-k2.txt -- \
  python3 -m bench.host_time "$M" -k 2 -n 512 > $OUT/spy-run.txt 2>&1
gzip -c /tmp/spy-k2.txt > $OUT/spy-k2.txt.gz
python3 -m bench.native_stacks /tmp/spy-k2.txt > $OUT/spy-k2-summary.txt 2>&1
sed -n '/== ggml_backend_sched_graph_compute_async/,/== llama_batch_compat/p' $OUT/spy-k2-summary.txt | head -90
echo "[$((SECONDS - T0))s] done"
