#!/usr/bin/env bash
# session 27 call 2 (H200): the proposed patch 0008-sched-async-inputs, GGML_SCHED_ASYNC_INPUTS=1 against =0 on one
# build, in alternating processes: llama-completion, `run --no-mtp` and `run` k=2 (token embedding on the GPU, the
# runtime's default since call 1). Build of the shipped and proposed patches (0001, 0002, 0004, 0007, 0008), drafts
# one decode each (GGUF_MTP_DRAFT_CHAIN=0, the shipped path); the 9B shape (Q8_0, ~70% head, 32k draft vocabulary),
# 256 tokens greedy; then bench.host_time at k=2 both ways (time inside llama_decode before the GPU starts).
set -uo pipefail
T0=$SECONDS
left() { echo $(( 585 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -m1 "Model name"; nproc
GGUF_MTP_PATCHES=proposed DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error\|patch" | tail -4
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "[$((SECONDS - T0))s] model: $M; $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1 GGUF_MTP_DRAFT_CHAIN=0
python3 -c "import bench.oneshot as o, bench.llamacpp as l, pathlib; l.write_prompt(pathlib.Path('/tmp/p.txt'), o.PROMPT)"
cat "$M" > /dev/null
R=$OUT/ab.jsonl
lc() {  # $1: label, $2: GGML_SCHED_ASYNC_INPUTS, rest: extra args
  local label=$1 e=$2; shift 2
  GGML_SCHED_ASYNC_INPUTS=$e timeout 60 /tmp/lcpp/bin/llama-completion -m "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --temp 0 --seed 0 -no-cnv \
    --ignore-eos "$@" > /tmp/lc.txt 2>&1
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$label\", \"tps\": ${tps:-null}}" | tee -a $R
}
run() {  # $1: label, $2: embd env, rest: run args
  local label=$1 e=$2; shift 2
  GGML_SCHED_ASYNC_INPUTS=$e timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    "$@" --stats-json /tmp/st.json --force > /tmp/out-$label.txt 2>/tmp/err.txt || tail -3 /tmp/err.txt
  python3 - "$label" >> $R <<'PY'
import json, sys
s = json.load(open("/tmp/st.json"))
print(json.dumps({"row": sys.argv[1], "tps": s.get("decode_tps"), "steps": s.get("steps")}))
PY
  tail -1 $R
}
for i in 1 2 3 4; do
  [ "$(left)" -gt 150 ] || break
  lc lc-0 0; lc lc-1 1
  run plain-0 0 --no-mtp; run plain-1 1 --no-mtp
  run k2-0 0 --spec-draft-n-max 2; run k2-1 1 --spec-draft-n-max 2
done
cmp /tmp/out-plain-0.txt /tmp/out-plain-1.txt && cmp /tmp/out-plain-0.txt /tmp/out-k2-1.txt && cmp /tmp/out-plain-0.txt /tmp/out-k2-0.txt && echo "texts equal"
head -c 300 /tmp/err.txt; echo
for e in 0 1; do
  [ "$(left)" -gt 60 ] || break
  GGML_SCHED_ASYNC_INPUTS=$e timeout 50 python3 -m bench.host_time "$M" -n 256 -k 2 2>&1 \
    | grep -v "^llama\|^load\|^print_info\|^common\|^\s*$" | tail -12 | sed "s/^/async=$e /" | tee -a $OUT/host.txt
done
echo "[$((SECONDS - T0))s] done"
