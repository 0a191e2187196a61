#!/usr/bin/env bash
# session 30 call 2 (H200, a fresh machine; the shipped patches): where the GPU's time goes, kernel by kernel, with
# Nsight Systems where the machine has it: llama-completion, `run` k=2 (the host feed, the default) and `run` k=2 with
# the head fed behind the verify (GGUF_MTP_DEVICE_FEED=1), 64 tokens each under `nsys profile` (CUDA graphs traced
# node by node); the kernel sums and each profile's GPU timeline come back under $OUT/prof. Then alternating rounds
# of `run` k=2 and llama-completion in what is left.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-585} EXTRA_PATCH=none; source bench/reference/same-call-h200-9b-s28/common.sh
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"; ls /usr/local/cuda/bin | tr '\n' ' ' | head -c 600; echo
mkdir -p "$OUT/prof"
prof() {  # $1: label, rest: the command
  local label=$1; shift
  [ -n "$NSYS" ] || return 0
  timeout 120 "$NSYS" profile --trace=cuda --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite true \
    -o "/tmp/prof-$label" "$@" > "/tmp/prof-$label.log" 2>&1 || tail -3 "/tmp/prof-$label.log"
  timeout 120 "$NSYS" stats --force-export=true --report cuda_gpu_kern_sum,cuda_gpu_trace --format csv \
    --output "/tmp/st-$label" "/tmp/prof-$label.nsys-rep" > /dev/null 2>&1 || echo "stats failed: $label"
  cp /tmp/st-"$label"_cuda_gpu_kern_sum.csv "$OUT/prof/$label-kern-sum.csv" 2>/dev/null
  gzip -c /tmp/st-"$label"_cuda_gpu_trace.csv > "$OUT/prof/$label-trace.csv.gz" 2>/dev/null
  echo "[$((SECONDS - T0))s] profiled $label: $(du -h "$OUT/prof/$label-trace.csv.gz" 2>/dev/null | cut -f1)"
}
P64=(-m "$M" -f /tmp/p.txt -n 64 -c 4096 -ngl 99 --temp 0 --seed 0)
prof lc /tmp/lcpp/bin/llama-completion "${P64[@]}" -no-cnv --ignore-eos
prof k2 python3 -m gguf_mtp_cli.main run "${P64[@]}" --spec-draft-n-max 2
GGUF_MTP_DEVICE_FEED=1 prof k2feed python3 -m gguf_mtp_cli.main run "${P64[@]}" --spec-draft-n-max 2
prof plain python3 -m gguf_mtp_cli.main run "${P64[@]}" --no-mtp
for i in $(seq 1 30); do
  [ "$(left)" -gt 15 ] || break
  run k2 --spec-draft-n-max 2; lc
done
echo "[$((SECONDS - T0))s] done"
