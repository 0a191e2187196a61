#!/usr/bin/env bash
# session 26 call 3 (H200, call 1's machine still held): where auto's step goes when it runs k=2 throughout, against
# a fixed k=2: `run --perf` (each decode waited for) and plain `run`, alternating processes, one decode a draft
set -uo pipefail
T0=$SECONDS
ls /tmp/lcpp/bin/llama-completion >/dev/null || { echo "no build: a fresh machine"; exit 3; }
M=$(grep -m1 -i "^9b q8_0, noisy head.*, draft vocab 32768=" /tmp/gguf-mtp-bench/models-9b.txt | cut -d= -f2-)
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1 GGUF_MTP_DRAFT_CHAIN=0
P=$(ls /tmp/gguf-mtp-out/.oneshot/prompt.txt 2>/dev/null || echo "")
[ -n "$P" ] || { python3 -c "import bench.oneshot as o, bench.llamacpp as l, pathlib; l.write_prompt(pathlib.Path('/tmp/p.txt'), o.PROMPT)"; P=/tmp/p.txt; }
for i in 1 2 3 4; do
  for k in 2 auto; do
    for perf in --perf ""; do
      [ $((SECONDS - T0)) -lt 560 ] || break 3
      timeout 60 python3 -m gguf_mtp_cli.main run "$M" -f "$P" -n 256 -c 4096 -ngl 99 --spec-draft-n-max $k $perf \
        --stats-json /tmp/st.json --force > /dev/null 2>/tmp/err.txt || tail -3 /tmp/err.txt
      python3 - "$k" "$perf" >> $OUT/perf.txt <<'PY'
import json, sys
s = json.load(open("/tmp/st.json"))
bd = s.get("breakdown") or {}
a = s.get("auto") or {}
print(json.dumps({"k": sys.argv[1], "perf": bool(sys.argv[2]), "tps": s.get("decode_tps"), "steps": s.get("steps"),
                  "bd": bd, "runs": a.get("runs"), "shadow_ms": a.get("shadow_ms")}))
PY
      tail -1 $OUT/perf.txt | cut -c1-400
    done
  done
done
echo "[$((SECONDS - T0))s] done"
