#!/usr/bin/env bash
# session 42 call 3 (fresh H200): call 2's build (patch 0019 as cuda-mmvq-aligned) on another machine, 9B shape, to
# repeat a draft's time: `run --perf` k=2 as shipped and with the head's block and LM head at Q4_0 (hq4b), twice each
# alternating; then rounds of llama-completion stock and switched, llama.cpp's MTP k=2 switched, `run` k=2 as shipped
# and hq4b.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-470} SHAPE=9b EXTRA_PATCH="none"
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --mtp-type q4_0 --draft-head-type q4_0 -o /tmp/hq4b.gguf --force -q 2>&1 | tail -1
for i in 1 2; do for s in ship hq4b; do
  extra=(); [ $s = ship ] || extra=(--mtp /tmp/$s.gguf)
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    --spec-draft-n-max 2 "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s-$i', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], 'sha': s.get('tokens_sha256', '')[:16], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
lcx() {  # $1: label; llama-completion under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc-$1.out 2>/tmp/lc-$1.txt
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc-$1.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
specx() {  # $1: label, $2: k; llama.cpp's MTP under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-speculative-simple "${COMMON[@]}" --spec-type draft-mtp --spec-draft-n-max "$2" -lv 4 > /tmp/sp.txt 2>&1
  local tps acc; tps=$(grep -o "speed: *[0-9.]* t/s" /tmp/sp.txt | tail -1 | grep -o "[0-9.]*")
  acc=$(grep -o "n_accept *= *[0-9]*" /tmp/sp.txt | tail -1 | grep -o "[0-9]*$")
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}, \"accepted\": ${acc:-null}}" | tee -a "$R"
}
for i in $(seq 1 40); do [ "$(left)" -gt 35 ] || break
  lcx lc; GGML_CUDA_MMVQ_ALIGNED=1 lcx lc-a; GGML_CUDA_MMVQ_ALIGNED=1 specx spec2-a 2
  run k2 --spec-draft-n-max 2; run k2-hq4b --spec-draft-n-max 2 --mtp /tmp/hq4b.gguf
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus lc-a lc --versus k2 lc-a --versus k2 spec2-a --versus k2-hq4b k2 --versus k2-hq4b lc-a --versus k2 lc
echo "[$((SECONDS - T0))s] done"
