#!/usr/bin/env bash
# (As it ran: 0019 was then proposed/0019-cuda-mmvq-q8-0-wide.patch with the switch GGML_CUDA_MMVQ_Q8_0_WIDE; it
# ships as patches/llama.cpp/0019-cuda-mmvq-q8-0-aligned.patch, GGML_CUDA_MMVQ_Q8_0_ALIGNED, the code unchanged.)
# session 41 call 3 (fresh H200): proposed patch 0019 (cuda-mmvq-q8-0-wide) with 0018 (mtp-self-feed) on the shipped
# set, 9B shape. (1) bench/cuda/q8_0_matvec.cu (our kernel variants; the layouts 0019 ships among them). (2)
# test-backend-ops: Q8_0 MUL_MAT and MUL_MAT_VEC_FUSION against the CPU with GGML_CUDA_MMVQ_Q8_0_WIDE=0 and =1, and
# Q8_0 MUL_MAT perf (4096 x 14336, 1-5 and 8 columns) both ways. (3) `run --perf` k=2 both ways. (4) Rounds of
# llama-completion stock and wide, `run` k=2 narrow and wide, self-fed wide, llama.cpp's own MTP k=2 stock.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-525} SHAPE=9b EXTRA_PATCH="0018 0019"
source bench/reference/same-call-h200-9b-s28/common.sh
W=GGML_CUDA_MMVQ_Q8_0_WIDE
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/q8mv bench/cuda/q8_0_matvec.cu && /tmp/q8mv 64 > "$OUT/q8mv.txt"; tail -1 "$OUT/q8mv.txt"
SRC=/tmp/b/llama_cpp_python-0.3.36
( g++ -O1 -std=c++17 "$SRC/vendor/llama.cpp/tests/test-backend-ops.cpp" -I"$SRC/vendor/llama.cpp/ggml/include" \
    -L/tmp/lcpp/bin -lggml -lggml-base -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/tbo > /tmp/tbo.log 2>&1 || tail -5 /tmp/tbo.log ) &
TBO=$!
for w in 0 1; do
  env $W=$w timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    --spec-draft-n-max 2 --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-w$w', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], 'sha': s.get('tokens_sha256', '')[:16], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done
wait $TBO
echo "[$((SECONDS - T0))s] perf rows, test-backend-ops built; $(left) s left"
if [ -x /tmp/tbo ]; then
  for w in 0 1; do
    env $W=$w timeout 60 /tmp/tbo test -b CUDA0 -o MUL_MAT -p 'type_a=q8_0' 2>&1 | grep -v "^ggml_\|^load_backend\|^  MUL_MAT.*OK$" | tail -6 | sed "s/^/test w$w: /"
    env $W=$w timeout 60 /tmp/tbo test -b CUDA0 -o MUL_MAT_VEC_FUSION -p 'type=q8_0' 2>&1 | grep -v "^ggml_\|^load_backend\|OK$" | tail -4 | sed "s/^/fusion w$w: /"
    env $W=$w timeout 60 /tmp/tbo perf -b CUDA0 -o MUL_MAT -p 'type_a=q8_0,type_b=f32,m=4096,n=[1-8],k=14336' 2>&1 | grep "MUL_MAT" | sed "s/^/perf w$w: /" | tee -a "$OUT/backend-ops.txt"
  done
fi
echo "[$((SECONDS - T0))s] backend-ops done; $(left) s left"
lcx() {  # $1: label; llama-completion under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc-$1.out 2>/tmp/lc-$1.txt
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc-$1.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
for i in $(seq 1 40); do [ "$(left)" -gt 35 ] || break
  lcx lc; GGML_CUDA_MMVQ_Q8_0_WIDE=1 lcx lc-w; GGML_CUDA_MMVQ_Q8_0_WIDE=0 run k2-n --spec-draft-n-max 2
  run k2 --spec-draft-n-max 2
  GGUF_MTP_SELF_FEED=1 run k2-sf --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
# greedy text: stock against wide llama-completion (a float-order change may flip a near tie)
cmp -s /tmp/lc-lc.out /tmp/lc-lc-w.out && echo "llama-completion stock and wide: the same text" \
  || echo "llama-completion stock and wide: texts differ from byte $(cmp /tmp/lc-lc.out /tmp/lc-lc-w.out | grep -o 'byte [0-9]*')"
python3 -m bench.same_call "$R" --versus k2 k2-n --versus lc-w lc --versus k2 lc-w --versus k2 spec2 --versus k2-sf k2
echo "[$((SECONDS - T0))s] done"
