#!/usr/bin/env bash
# (As it ran, with 0019 then named cuda-mmvq-q8-0-aligned and its switch GGML_CUDA_MMVQ_Q8_0_ALIGNED: Q8_0 only; call 2
# on ran it generalized to Q4_0 and renamed cuda-mmvq-aligned, switch GGML_CUDA_MMVQ_ALIGNED.)
# session 42 call 1 (fresh H200): the shipped set with patch 0019 extended (Q8_0's aligned layout from 1-4 columns to
# 1-8, and 2 rows a CUDA block at one column for weights of 16384 rows or more), 9B shape. (1) bench/cuda's kernel
# benchmarks (Q8_0 again on this machine; Q4_0 where the file is there). (2) `run --perf` k=2 as shipped, with the
# drafts' LM head at Q4_0 (hq4), and with the head's block and LM head at Q4_0 (hq4b). (3) test-backend-ops: Q8_0
# MUL_MAT and MUL_MAT_VEC_FUSION against the CPU with the switch off and on; MUL_MAT perf 4096 x 14336 at 1-8
# columns for the types of the release files, the switch on, and Q8_0 off. (4) Rounds of llama-completion stock and
# switched, llama.cpp's MTP k=2 switched, `run` k=2, k=4 (a verify of 5 columns), k=4 with the switch off.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-540} SHAPE=9b EXTRA_PATCH="none"
source bench/reference/same-call-h200-9b-s28/common.sh
A=GGML_CUDA_MMVQ_Q8_0_ALIGNED
for q in q8_0 q4_0; do
  [ -f bench/cuda/${q}_matvec.cu ] || continue
  nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/${q}mv bench/cuda/${q}_matvec.cu && /tmp/${q}mv 64 > "$OUT/${q}mv.txt"
  tail -1 "$OUT/${q}mv.txt"
done
echo "[$((SECONDS - T0))s] kernel benchmarks done; $(left) s left"
SRC=/tmp/b/llama_cpp_python-0.3.36
( g++ -O1 -std=c++17 "$SRC/vendor/llama.cpp/tests/test-backend-ops.cpp" -I"$SRC/vendor/llama.cpp/ggml/include" \
    -L/tmp/lcpp/bin -lggml -lggml-base -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/tbo > /tmp/tbo.log 2>&1 || tail -5 /tmp/tbo.log ) &
TBO=$!
python3 -m gguf_mtp_cli.main extract "$M" --head-only --draft-head-type q4_0 -o /tmp/hq4.gguf --force -q 2>&1 | tail -1
python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 --draft-head-type q4_0 -o /tmp/hq4b.gguf --force -q 2>&1 | tail -1
for s in ship hq4 hq4b; do
  extra=(); [ $s = ship ] || extra=(--mtp /tmp/$s.gguf)
  perfrow "perf-$s" --spec-draft-n-max 2 "${extra[@]}"
done
wait $TBO
echo "[$((SECONDS - T0))s] perf rows, test-backend-ops built; $(left) s left"
if [ -x /tmp/tbo ]; then
  for a in 0 1; do
    env $A=$a timeout 90 /tmp/tbo test -b CUDA0 -o MUL_MAT -p 'type_a=q8_0' 2>&1 | grep -v "^ggml_\|^load_backend\|^  MUL_MAT.*OK$" | tail -6 | sed "s/^/test a$a: /"
    env $A=$a timeout 60 /tmp/tbo test -b CUDA0 -o MUL_MAT_VEC_FUSION -p 'type=q8_0' 2>&1 | grep -v "^ggml_\|^load_backend\|OK$" | tail -4 | sed "s/^/fusion a$a: /"
  done
  env $A=0 timeout 60 /tmp/tbo perf -b CUDA0 -o MUL_MAT -p 'type_a=q8_0,type_b=f32,m=4096,n=[1-8],k=14336' 2>&1 | grep "MUL_MAT" | sed "s/^/perf a0: /" | tee -a "$OUT/backend-ops.txt"
  env $A=1 timeout 90 /tmp/tbo perf -b CUDA0 -o MUL_MAT -p 'type_a=(q8_0|q4_0|q5_0|q4_K|q5_K|q6_K),type_b=f32,m=4096,n=[1-8],k=14336' 2>&1 | grep "MUL_MAT" | sed "s/^/perf a1: /" | tee -a "$OUT/backend-ops.txt"
fi
echo "[$((SECONDS - T0))s] backend-ops done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 40 ] || break
  lcx lc; GGML_CUDA_MMVQ_Q8_0_ALIGNED=1 lcx lc-a; GGML_CUDA_MMVQ_Q8_0_ALIGNED=1 specx spec2-a 2
  run k2 --spec-draft-n-max 2; run k4 --spec-draft-n-max 4; GGML_CUDA_MMVQ_Q8_0_ALIGNED=0 run k4-n --spec-draft-n-max 4
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
cmp -s /tmp/lc-lc.out /tmp/lc-lc-a.out && echo "llama-completion stock and switched: the same text" \
  || echo "llama-completion stock and switched: texts differ from byte $(cmp /tmp/lc-lc.out /tmp/lc-lc-a.out | grep -o 'byte [0-9]*')"
python3 -m bench.same_call "$R" --versus lc-a lc --versus k2 lc-a --versus k2 spec2-a --versus k4 k4-n --versus k4 k2 --versus k2 lc
echo "[$((SECONDS - T0))s] done"
