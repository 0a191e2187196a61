#!/usr/bin/env bash
# session 42 call 2 (fresh H200): the shipped set with patch 0019 generalized (cuda-mmvq-aligned: Q8_0 and Q4_0, 1-8
# columns, rows a CUDA block by the weight's row count; switch GGML_CUDA_MMVQ_ALIGNED), 9B shape. (1) test-backend-ops:
# Q8_0 and Q4_0 MUL_MAT and MUL_MAT_VEC_FUSION against the CPU with the switch off and on; MUL_MAT perf 4096 x 14336 at
# 1-8 columns both ways. (2) `run --perf` k=2 as shipped and with the head's block and LM head at Q4_0 (hq4b). (3)
# Rounds of llama-completion stock and switched, llama.cpp's MTP k=2 switched, `run` k=2 (as shipped and hq4b), k=4.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-500} SHAPE=9b EXTRA_PATCH="none"
source bench/reference/same-call-h200-9b-s28/common.sh
A=GGML_CUDA_MMVQ_ALIGNED
SRC=/tmp/b/llama_cpp_python-0.3.36
( g++ -O1 -std=c++17 "$SRC/vendor/llama.cpp/tests/test-backend-ops.cpp" -I"$SRC/vendor/llama.cpp/ggml/include" \
    -L/tmp/lcpp/bin -lggml -lggml-base -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/tbo > /tmp/tbo.log 2>&1 || tail -5 /tmp/tbo.log ) &
TBO=$!
python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 --draft-head-type q4_0 -o /tmp/hq4b.gguf --force -q 2>&1 | tail -1
for s in ship hq4b; do
  extra=(); [ $s = ship ] || extra=(--mtp /tmp/$s.gguf)
  perfrow "perf-$s" --spec-draft-n-max 2 "${extra[@]}"
done
grep -h "llama.cpp patches" /tmp/perf-err.txt | head -1
wait $TBO
echo "[$((SECONDS - T0))s] perf rows, test-backend-ops built; $(left) s left"
if [ -x /tmp/tbo ]; then
  for a in 0 1; do
    env $A=$a timeout 90 /tmp/tbo test -b CUDA0 -o MUL_MAT -p 'type_a=(q8_0|q4_0),' 2>&1 | grep -v "^ggml_\|^load_backend\|^  MUL_MAT.*OK$" | tail -5 | sed "s/^/test a$a: /"
    env $A=$a timeout 60 /tmp/tbo test -b CUDA0 -o MUL_MAT_VEC_FUSION -p 'type=(q8_0|q4_0),' 2>&1 | grep -v "^ggml_\|^load_backend\|OK$" | tail -3 | sed "s/^/fusion a$a: /"
    env $A=$a timeout 60 /tmp/tbo perf -b CUDA0 -o MUL_MAT -p 'type_a=(q8_0|q4_0),type_b=f32,m=4096,n=[1-8],k=14336' 2>&1 | grep "MUL_MAT" | sed "s/^/perf a$a: /" | tee -a "$OUT/backend-ops.txt"
  done
fi
echo "[$((SECONDS - T0))s] backend-ops done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lcx lc; GGML_CUDA_MMVQ_ALIGNED=1 lcx lc-a; GGML_CUDA_MMVQ_ALIGNED=1 specx spec2-a 2
  run k2 --spec-draft-n-max 2; run k2-hq4b --spec-draft-n-max 2 --mtp /tmp/hq4b.gguf; run k4 --spec-draft-n-max 4
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
cmp -s /tmp/lc-lc.out /tmp/lc-lc-a.out && echo "llama-completion stock and switched: the same text" \
  || echo "llama-completion stock and switched: texts differ from byte $(cmp /tmp/lc-lc.out /tmp/lc-lc-a.out | grep -o 'byte [0-9]*')"
python3 -m bench.same_call "$R" --versus lc-a lc --versus k2 lc-a --versus k2 spec2-a --versus k2-hq4b k2 --versus k4 k2 --versus k2 lc
echo "[$((SECONDS - T0))s] done"
