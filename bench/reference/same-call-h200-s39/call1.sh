#!/usr/bin/env bash
# session 39 call 1 (fresh H200): the shipped set (0015 included) on the 9B shape (Q8_0 trunk, ~70% head, 32k draft
# vocabulary). (1) Where a draft decode's host time goes: py-spy's native stacks of `bench.host_time -k 2`, summed
# under the draft decode (MtpProposer._decode), the feed (feed_from_device) and the verify, and two untimed-profiler
# `bench.host_time -k 2` processes. (2) 0015's prompt revision: `run` on a ~3.5k-token prompt, the switch on and =0,
# alternating (prompt t/s). (3) Rounds of llama-completion, `run` k=2 and llama.cpp's own MTP k=2.
rm -rf /tmp/lcpp /tmp/b
export BUDGET_S=${BUDGET_S:-575} SHAPE=9b EXTRA_PATCH=none
source bench/reference/same-call-h200-9b-s28/common.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
q() { grep -v "^llama\|^load\|^print_info\|^common\|^\s*$\|UserWarning\|_warn_once" ; }
for i in 1 2; do timeout 60 python3 -m bench.host_time "$M" -k 2 -n 256 2>&1 | q | tail -20 | tee -a "$OUT/host.txt"; done
timeout 90 /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o /tmp/spy-k2.txt -- \
  python3 -m bench.host_time "$M" -k 2 -n 512 > "$OUT/spy-run.txt" 2>&1
gzip -c /tmp/spy-k2.txt > "$OUT/spy-k2.txt.gz"
F="llama_context::decode llama_context::process_ubatch ggml_backend_sched_graph_compute_async ggml_backend_cuda_graph_compute"
for w in MtpProposer._decode MtpProposer.feed_from_device batch_step; do
  python3 -m bench.native_stacks /tmp/spy-k2.txt $F --within "$w" --top 14 > "$OUT/spy-$w.txt" 2>&1
  head -30 "$OUT/spy-$w.txt"
done
echo "[$((SECONDS - T0))s] profiles done; $(left) s left"
python3 - <<'PY'
import bench.llamacpp as l, pathlib
text = open("gguf_mtp/runtime/proposer.py").read() + open("gguf_mtp/runtime/speculative.py").read()
l.write_prompt(pathlib.Path("/tmp/long.txt"), "Explain this code.\n\n" + text[:14000])
PY
for i in 1 2 3; do for sw in 1 0; do
  GGUF_MTP_MTP_OUTPUT_ROWS=$sw timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/long.txt -n 16 -c 8192 -ngl 99 \
    --spec-draft-n-max 2 --stats-json /tmp/lp.json --force > /dev/null 2>/tmp/lp-err.txt || tail -3 /tmp/lp-err.txt
  python3 -c "import json; s = json.load(open('/tmp/lp.json')); print(json.dumps({'row': 'long-r$sw', 'prompt_tokens': s.get('prompt_tokens'), 'prompt_tps': s.get('prompt_tps')}))" | tee -a "$OUT/long.jsonl"
done; done
echo "[$((SECONDS - T0))s] long prompts done; $(left) s left"
for i in $(seq 1 40); do [ "$(left)" -gt 30 ] || break
  lc; run k2 --spec-draft-n-max 2; spec 2
done
grep -h "MTP:\|llama.cpp patches" /tmp/err-*.txt | sort | uniq -c
python3 -m bench.same_call "$R" --versus k2 spec2
echo "[$((SECONDS - T0))s] done"
