#!/usr/bin/env bash
# session 36 call 1 (fresh H200): the 9B shape (Q8_0, ~70% head, 32k draft vocabulary) on one build of the shipped
# patches plus proposed 0004 and 0009. (1) Where a draft decode's host preparation goes: py-spy's native stacks of one
# shipped-path process (.carry/pyspy). (2) Session 35's Python change on this host: bench.step_python with the runtime
# as it is and as it was (/tmp/site-old). (3) Rounds (rows.sh): llama-completion, llama.cpp's MTP k=2 every other
# round, `run` k=2 on the shipped path with today's runtime and with the old one, chained + fast path (session 35:
# +0.9% on one machine), and auto chained against auto one decode a draft every third round.
rm -rf /tmp/lcpp /tmp/b /tmp/site-old
export BUDGET_S=${BUDGET_S:-585} SHAPE=9b EXTRA_PATCH="0004 0009"
source bench/reference/same-call-h200-9b-s28/common.sh
source bench/reference/same-call-h200-s36/rows.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
export GGUF_MTP_DRAFT_CHAIN=0 GGML_CUDA_GRAPH_REUSE_FAST_PATH=0
timeout 90 /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o /tmp/spy-k2.txt -- \
  python3 -m bench.host_time "$M" -k 2 -n 512 > "$OUT/spy-run.txt" 2>&1
gzip -c /tmp/spy-k2.txt > "$OUT/spy-k2.txt.gz"
python3 -m bench.native_stacks /tmp/spy-k2.txt > "$OUT/spy-k2-summary.txt" 2>&1
python3 -m bench.native_stacks /tmp/spy-k2.txt --within MtpProposer._decode llama_context::decode \
  ggml_backend_sched_graph_compute_async llama_batch_compat::init > "$OUT/spy-k2-drafts.txt" 2>&1
sed -n '/== llama_context::decode/,/== ggml_backend_sched/p' "$OUT/spy-k2-drafts.txt" | head -30
for i in 1 2; do
  timeout 60 python3 -m bench.step_python "$M" -k 2 -ngl 99 -n 256 --answers 6 2>&1 | tail -1 | tee -a "$OUT/step-python.txt"
  old timeout 60 python3 -m bench.step_python "$M" -k 2 -ngl 99 -n 256 --answers 6 2>&1 | tail -1 \
    | sed 's/^/old: /' | tee -a "$OUT/step-python.txt"
done
unset GGUF_MTP_DRAFT_CHAIN GGML_CUDA_GRAPH_REUSE_FAST_PATH
echo "[$((SECONDS - T0))s] profiles done; $(left) s left"
rounds
echo "[$((SECONDS - T0))s] done"
