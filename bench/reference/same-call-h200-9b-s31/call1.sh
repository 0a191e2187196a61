#!/usr/bin/env bash
# session 31 call 1 (H200, a fresh machine; the shipped patches plus proposed 0011 cuda-argmax-split): test-backend-ops
# ARGMAX on CUDA0 against the CPU and timed with the split and without (GGML_CUDA_ARGMAX_SPLIT=0, one build); the
# GPU timeline of one traced answer (bench/gpu_timeline.py) for plain, k=2 and k=2 without the split; then rounds of
# `run` k=2 with the split, without it, llama-completion, and k=2 with the head fed behind the verify.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-585} EXTRA_PATCH=0011; source bench/reference/same-call-h200-9b-s28/common.sh
SRC=$(ls -d /tmp/b/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
grep -c gguf_mtp_patch_cuda_argmax_split "$SRC/ggml/src/ggml-cuda/argmax.cu"
(g++ -O2 -std=c++17 "$SRC/tests/test-backend-ops.cpp" -I"$SRC/ggml/include" -L/tmp/lcpp/bin -lggml -lggml-base \
   -Wl,-rpath,/tmp/lcpp/bin -lpthread -o /tmp/lcpp/bin/test-backend-ops > /tmp/tbo.log 2>&1; echo "tbo rc=$?" >> /tmp/tbo.log) &
TBO=$!
mkdir -p /tmp/tl
for row in "0" "2" "2 GGML_CUDA_ARGMAX_SPLIT=0"; do set -- $row; k=$1; shift
  name="k$k${1:+-nosplit}"
  echo "[$((SECONDS - T0))s] timeline $name"
  env "$@" timeout 120 python3 -m bench.gpu_timeline "$M" -k "$k" -n 64 --trace "/tmp/tl/$name.json.gz" 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info" > "/tmp/tl/$name.txt"; head -70 "/tmp/tl/$name.txt"
done
ls -la /tmp/tl; for f in /tmp/tl/*.json.gz; do [ "$(stat -c %s "$f")" -lt 12000000 ] || rm -f "$f"; done
tar czf "$OUT/timeline.tgz" -C /tmp tl
wait $TBO; tail -3 /tmp/tbo.log
echo "[$((SECONDS - T0))s] backend-ops"
{ /tmp/lcpp/bin/test-backend-ops test -o ARGMAX 2>&1 | tail -12
  /tmp/lcpp/bin/test-backend-ops perf -o ARGMAX 2>&1 | grep -i "argmax" | tail -12
  GGML_CUDA_ARGMAX_SPLIT=0 /tmp/lcpp/bin/test-backend-ops perf -o ARGMAX 2>&1 | grep -i "argmax" | tail -12; } | tee "$OUT/backend-ops.txt"
run plain --no-mtp; run k2-check --spec-draft-n-max 2; cmp /tmp/out-plain.txt /tmp/out-k2-check.txt && echo equal
for i in $(seq 1 30); do [ "$(left)" -gt 25 ] || break
  run k2-split --spec-draft-n-max 2; GGML_CUDA_ARGMAX_SPLIT=0 run k2-one --spec-draft-n-max 2; lc
  GGUF_MTP_DEVICE_FEED=1 run k2-split-feed --spec-draft-n-max 2
done
echo "[$((SECONDS - T0))s] done"
