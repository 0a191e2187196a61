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
  perfrow "perf-$s-$i" --spec-draft-n-max 2 "${extra[@]}"
done; done
echo "[$((SECONDS - T0))s] perf rows done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 35 ] || break
  lcx lc; GGML_CUDA_MMVQ_ALIGNED=1 lcx lc-a; GGML_CUDA_MMVQ_ALIGNED=1 specx spec2-a 2
  run k2 --spec-draft-n-max 2; run k2-hq4b --spec-draft-n-max 2 --mtp /tmp/hq4b.gguf
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus lc-a lc --versus k2 lc-a --versus k2 spec2-a --versus k2-hq4b k2 --versus k2-hq4b lc-a --versus k2 lc
echo "[$((SECONDS - T0))s] done"
