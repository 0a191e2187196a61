#!/usr/bin/env bash
# session 26 call 4 (H200, a fresh machine): where plain decoding (`run --no-mtp`) loses to llama-completion's
# printed speed. The shipped build (0001, 0002), the 9B shape (Q8_0, ~70% head, 32k draft vocabulary):
# llama-completion against `run --no-mtp --perf` in alternating processes (--plain-pairs: the decode alone and the
# host's time between decodes); bench.host_time at k=0 and k=2 (the library's loop, timed call by call, no CLI);
# py-spy's native stacks of one `run --no-mtp` process (the CLI's loop included); then auto against k=2 in pairs.
set -uo pipefail
T0=$SECONDS
left() { echo $(( 588 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
lscpu | grep -m1 "Model name"; nproc
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes 9b:q8_0 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error\|patch" | tail -4
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
echo "[$((SECONDS - T0))s] model: $M; $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .carry/pyspy/*.whl
q() { grep -v "^llama\|^load\|^print_info\|^common\|^\s*$" ; }
timeout $(( $(left) - 200 )) python3 -m bench.oneshot --model "9b Q8_0, noisy head, draft vocab 32768=$M" \
  --bin /tmp/lcpp/bin --ngl 99 -n 256 --drafts --plain-pairs 4 --out $OUT/plain-pairs.json 2>&1 | q | tail -6
for v in "-k 0" "-k 2"; do
  timeout 60 python3 -m bench.host_time "$M" -n 256 $v 2>&1 | q | tail -12 | tee -a $OUT/host.txt
done
python3 -c "import bench.oneshot as o, bench.llamacpp as l, pathlib; l.write_prompt(pathlib.Path('/tmp/p.txt'), o.PROMPT)"
echo "[$((SECONDS - T0))s] py-spy, run --no-mtp"
timeout 90 /tmp/pyspy/bin/py-spy record --native -r 1000 --format raw -o /tmp/spy-run.txt -- \
  python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 512 -c 4096 -ngl 99 --no-mtp --stats-json $OUT/spy-run-stats.json \
  > /dev/null 2> $OUT/spy-run-err.txt
gzip -c /tmp/spy-run.txt > $OUT/spy-run.txt.gz
{ python3 -m bench.native_stacks /tmp/spy-run.txt _run --within _run; python3 -m bench.native_stacks /tmp/spy-run.txt; } > $OUT/spy-run-summary.txt 2>&1
head -60 $OUT/spy-run-summary.txt
echo "[$((SECONDS - T0))s] auto against k=2, $(left) s left"
[ "$(left)" -gt 80 ] && timeout $(( $(left) - 5 )) python3 -m bench.oneshot \
  --model "9b Q8_0, noisy head, draft vocab 32768=$M" --bin /tmp/lcpp/bin --ngl 99 -n 256 --drafts 2 \
  --versus best auto --ab-n 4 --out $OUT/versus.json 2>&1 | q | tail -8
echo "[$((SECONDS - T0))s] done"
