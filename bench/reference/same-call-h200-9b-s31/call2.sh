#!/usr/bin/env bash
# session 31 call 2 (H200, a fresh machine; the shipped patches, 0011 cuda-argmax-split now among them, revised: the
# CPU's tie rule, and off unless GGML_CUDA_ARGMAX_SPLIT=1, which gguf-mtp sets): test-backend-ops ARGMAX on CUDA0
# (ties included) with the split and without; whether torch loads beside llama.cpp's CUDA libraries (three ways), the
# GPU timeline where one works; then rounds of `run` k=2, `run` k=2 with the stock argmax (GGML_CUDA_ARGMAX_SPLIT=0),
# llama-completion and `run --no-mtp`, with llama.cpp's MTP k=2 and `run` auto every third round.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-585} EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh
SRC=$(ls -d /tmp/b/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
grep -c "gguf_mtp_patch_cuda_argmax_split\|atoi(e) != 0" "$SRC/ggml/src/ggml-cuda/argmax.cu"
(g++ -O2 -std=c++17 "$SRC/tests/test-backend-ops.cpp" -I"$SRC/ggml/include" -L/tmp/lcpp/bin -lggml -lggml-base \
   -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/lcpp/bin/test-backend-ops > /tmp/tbo.log 2>&1; echo "tbo rc=$?" >> /tmp/tbo.log) &
TBO=$!
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
probe='import torch; print("torch", torch.__version__, torch.cuda.is_available())'
echo "probe llama first:"; timeout 60 python3 -c "import gguf_mtp.runtime, llama_cpp.llama_cpp; $probe" 2>&1 | tail -2
echo "probe torch first:"; timeout 60 python3 -c "$probe; import gguf_mtp.runtime, llama_cpp.llama_cpp; print('llama ok')" 2>&1 | tail -2
echo "probe LD_PRELOAD=$STDCXX:"; LD_PRELOAD=$STDCXX timeout 60 python3 -c "import gguf_mtp.runtime, llama_cpp.llama_cpp; $probe" 2>&1 | tail -2
mkdir -p /tmp/tl
for row in "0" "2" "2 GGML_CUDA_ARGMAX_SPLIT=0"; do set -- $row; k=$1; shift
  name="k$k${1:+-nosplit}"
  echo "[$((SECONDS - T0))s] timeline $name"
  env "$@" LD_PRELOAD=$STDCXX timeout 90 python3 -m bench.gpu_timeline "$M" -k "$k" -n 64 --trace "/tmp/tl/$name.json.gz" 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "/tmp/tl/$name.txt"; head -80 "/tmp/tl/$name.txt"
  [ -s "/tmp/tl/$name.json.gz" ] || break
done
for f in /tmp/tl/*.json.gz; do [ -f "$f" ] && [ "$(stat -c %s "$f")" -ge 12000000 ] && rm -f "$f"; done
tar czf "$OUT/timeline.tgz" -C /tmp tl
wait $TBO; tail -3 /tmp/tbo.log
echo "[$((SECONDS - T0))s] backend-ops"
{ /tmp/lcpp/bin/test-backend-ops test -o ARGMAX 2>&1 | tail -8
  GGML_CUDA_ARGMAX_SPLIT=1 /tmp/lcpp/bin/test-backend-ops test -o ARGMAX 2>&1 | tail -8
  GGML_CUDA_ARGMAX_SPLIT=1 /tmp/lcpp/bin/test-backend-ops perf -o ARGMAX 2>&1 | grep -i "argmax" | tail -6
  /tmp/lcpp/bin/test-backend-ops perf -o ARGMAX 2>&1 | grep -i "argmax" | tail -6; } | tee "$OUT/backend-ops.txt"
run plain --no-mtp; run k2-check --spec-draft-n-max 2; cmp /tmp/out-plain.txt /tmp/out-k2-check.txt && echo equal
for i in $(seq 1 30); do [ "$(left)" -gt 25 ] || break
  run k2 --spec-draft-n-max 2; GGML_CUDA_ARGMAX_SPLIT=0 run k2-stock-argmax --spec-draft-n-max 2; lc; run plain --no-mtp
  if [ $((i % 3)) = 1 ]; then spec 2; run auto; fi
done
echo "[$((SECONDS - T0))s] done"
