#!/usr/bin/env bash
# session 21 call 1 (H200): the 9B shape's one-shot table on this machine kind, and the verify's quantized
# mat-muls handed to MMQ (GGML_CUDA_MMVQ_MAX_COLS=1, diagnostic patch) against MMVQ (stock: up to 8 columns)
set -uo pipefail
T0=$SECONDS
cp bench/reference/oneshot-h200-9b-mmq/mmvq-max-cols.patch patches/llama.cpp/proposed/9001-diag-mmvq-max-cols.patch
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total,driver_version --format=csv,noheader
nproc; lscpu | grep "Model name"
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 DRAFTS="2 3" BUDGET=530 \
  ONESHOT_ARGS="--spec-drafts 2 3 --env-row GGML_CUDA_MMVQ_MAX_COLS=1" \
  bash bench/gpu.sh shapes 9b:q8_0 2>&1 | grep -v "^llama\|^load\|^print_info\|^common" | tail -60
M=/tmp/gguf-mtp-bench/9b-32L-Q8_0-noise0.06-dv32768.gguf
ls -la /tmp/gguf-mtp-bench/*.gguf
PYTHONPATH=/tmp/site python3 -c "from bench.oneshot import PROMPT; open('/tmp/p.txt','w').write(PROMPT)"
for spec in "2 1" "3 1" "2 8"; do
  set -- $spec
  left=$(( 590 - (SECONDS - T0) ))
  [ "$left" -gt 25 ] || { echo "no time left for k=$1 cols=$2"; break; }
  echo "=== run k=$1 --perf, GGML_CUDA_MMVQ_MAX_COLS=$2 ($left s left)"
  GGML_CUDA_MMVQ_MAX_COLS=$2 PYTHONPATH=/tmp/site LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin timeout $((left - 5)) \
    python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --spec-draft-n-max $1 --perf \
    --stats-json $OUT/perf-k$1-c$2.json --force 2>&1 >/dev/null | grep -v "^llama\|^load\|^print_info\|^common" | tail -4
done
echo "total $((SECONDS - T0)) s"
