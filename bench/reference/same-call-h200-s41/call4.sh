#!/usr/bin/env bash
# session 41 call 4 (fresh H200, what was left of the session's device time): the shipped set with patch 0019
# (cuda-mmvq-q8-0-aligned, now shipped), 9B shape. Rounds of llama-completion and llama.cpp's own MTP k=2, each stock
# and with 0019's switch on (the same kernels gguf-mtp runs), and `gguf-mtp run` k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-330} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
lcx() {  # $1: label; llama-completion under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc.txt 2>&1
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
specx() {  # $1: label, $2: k; llama-speculative-simple under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-speculative-simple "${COMMON[@]}" --spec-type draft-mtp --spec-draft-n-max "$2" -lv 4 > /tmp/sp.txt 2>&1
  local tps acc; tps=$(grep -o "speed: *[0-9.]* t/s" /tmp/sp.txt | tail -1 | grep -o "[0-9.]*")
  acc=$(grep -o "n_accept *= *[0-9]*" /tmp/sp.txt | tail -1 | grep -o "[0-9]*$")
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}, \"accepted\": ${acc:-null}}" | tee -a "$R"
}
for i in $(seq 1 40); do [ "$(left)" -gt 32 ] || break
  lc; GGML_CUDA_MMVQ_Q8_0_ALIGNED=1 lcx lc-a; spec 2; GGML_CUDA_MMVQ_Q8_0_ALIGNED=1 specx spec2-a 2
  run k2 --spec-draft-n-max 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 spec2-a --versus k2 lc-a --versus spec2-a spec2 --versus lc-a lc --versus k2 spec2
echo "[$((SECONDS - T0))s] done"
