#!/usr/bin/env bash
# session 40 call 1 (fresh H200): ggml-cuda's fused one-column mat-vecs on the 9B shape, the shipped set. (1) Timelines
# of k=2 with fusion on and off (GGML_CUDA_DISABLE_FUSION=1), each listing a draft decode's GPU events in order with
# their grids (which matrix each fused and unfused mat-vec is), and of plain decoding (k=0) on and off. (2) `run --perf`
# with the head as shipped and with its drafts' LM head alone at Q4_0 (hq4), fusion on and off. (3) Rounds of
# llama-completion and `run` k=2, fusion on and off, and llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-515} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m gguf_mtp_cli.main extract "$M" --head-only --draft-head-type q4_0 -o /tmp/hq4.gguf --force -q 2>&1 | tail -1
STDCXX=$(ldconfig -p | grep -m1 "libstdc++.so.6 " | sed 's/.*=> //')
for f in 0 1; do
  GGML_CUDA_DISABLE_FUSION=$f LD_PRELOAD=$STDCXX timeout 70 python3 -m bench.gpu_timeline "$M" -k 2 -n 64 --top 24 \
    --sequence 'decode[mtp] n=3' 2>&1 | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k2-nofuse$f.txt"
  grep -m3 "^k=2\|decode\[mtp\] n=3 \|decode\[tgt\] n=3 " "$OUT/timeline-9b-k2-nofuse$f.txt"
  GGML_CUDA_DISABLE_FUSION=$f LD_PRELOAD=$STDCXX timeout 70 python3 -m bench.gpu_timeline "$M" -k 0 -n 32 --top 16 2>&1 \
    | grep -v "^USDT\|^llama\|^load\|^print_info\|UserWarning\|_warn_once" > "$OUT/timeline-9b-k0-nofuse$f.txt"
  grep -m2 "^k=0\|decode\[tgt\] n=1 " "$OUT/timeline-9b-k0-nofuse$f.txt"
done
echo "[$((SECONDS - T0))s] timelines done; $(left) s left"
for s in ship hq4; do for f in 0 1; do
  extra=(); [ $s = hq4 ] && extra=(--mtp /tmp/hq4.gguf)
  GGML_CUDA_DISABLE_FUSION=$f timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    --spec-draft-n-max 2 "${extra[@]}" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': 'perf-$s-nofuse$f', 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], **s['breakdown']}))" \
    | tee -a "$OUT/perf.jsonl"
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
lcx() {  # $1: label; llama-completion under the caller's environment
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc.txt 2>&1
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"$1\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; GGML_CUDA_DISABLE_FUSION=1 lcx lc-nf; run k2 --spec-draft-n-max 2; GGML_CUDA_DISABLE_FUSION=1 run k2-nf --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus lc-nf lc --versus k2-nf k2 --versus k2 spec2 --versus k2 lc
echo "[$((SECONDS - T0))s] done"
