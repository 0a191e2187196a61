#!/usr/bin/env bash
# What every session-28 call script shares (sourced; run from the repository root on the GPU machine): the machine's
# facts, the build (the shipped patches plus EXTRA_PATCH, proposed ones by number, as "0012 0007", copied beside
# them for this build only; reused where the machine still holds it), the SHAPE (default 9b; 27b, 35b-a3b: Q8_0,
# ~70% head, 32k draft vocabulary), and one function per row kind, each one process and one 256-token greedy answer appending its t/s
# to $OUT/ab.jsonl:
# lc (llama-completion), spec K (llama-speculative-simple --spec-type draft-mtp), run LABEL ARGS... (`gguf-mtp run`;
# the environment a caller puts before it reaches the process). BUDGET_S: the seconds the call may take.
set -uo pipefail
T0=$SECONDS
left() { echo $(( BUDGET_S - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep -m1 "Model name"; nproc
nvcc --version | tail -1; ldd --version | head -1
for p in $EXTRA_PATCH; do [ "$p" = none ] || cp "patches/llama.cpp/proposed/$p"-*.patch patches/llama.cpp/; done
SHAPE=${SHAPE:-9b}
GGUF_MTP_PATCHES=1 DRAFT_VOCAB=32768 DV_ONLY=1 BUDGET=1 bash bench/gpu.sh shapes "$SHAPE:${TRUNK:-q8_0}" 2>&1 \
  | grep -v "^llama\|^load\|^print_info\|^common" | grep "built\|models\|error\|patch" | tail -6
M=$(grep -m1 -i "^$SHAPE ${TRUNK:-q8_0}, noisy head.*, draft vocab 32768=" "/tmp/gguf-mtp-bench/models-$SHAPE.txt" | cut -d= -f2-)
echo "[$((SECONDS - T0))s] model: $M; $(left) s left"
export PYTHONPATH=/tmp/site:$PWD LLAMA_CPP_LIB_PATH=/tmp/lcpp/bin PYTHONUNBUFFERED=1
python3 -c "import bench.oneshot as o, bench.llamacpp as l, pathlib; l.write_prompt(pathlib.Path('/tmp/p.txt'), o.PROMPT)"
cat "$M" > /dev/null
R=$OUT/ab.jsonl
COMMON=(-m "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 --temp 0 --seed 0)
lc() {
  timeout 60 /tmp/lcpp/bin/llama-completion "${COMMON[@]}" -no-cnv --ignore-eos > /tmp/lc.txt 2>&1
  local tps; tps=$(grep -o "eval time =.*tokens per second" /tmp/lc.txt | grep -v prompt | tail -1 | grep -o "[0-9.]* tokens per second" | cut -d' ' -f1)
  echo "{\"row\": \"lc\", \"tps\": ${tps:-null}}" | tee -a "$R"
}
spec() {  # $1: k
  timeout 60 /tmp/lcpp/bin/llama-speculative-simple "${COMMON[@]}" --spec-type draft-mtp --spec-draft-n-max "$1" -lv 4 > /tmp/sp.txt 2>&1
  local tps acc; tps=$(grep -o "speed: *[0-9.]* t/s" /tmp/sp.txt | tail -1 | grep -o "[0-9.]*")
  acc=$(grep -o "n_accept *= *[0-9]*" /tmp/sp.txt | tail -1 | grep -o "[0-9]*$")
  echo "{\"row\": \"spec$1\", \"tps\": ${tps:-null}, \"accepted\": ${acc:-null}}" | tee -a "$R"
}
run() {  # $1: label, rest: run args
  local label=$1; shift
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    "$@" --stats-json /tmp/st.json --force > "/tmp/out-$label.txt" 2>"/tmp/err-$label.txt" || tail -3 "/tmp/err-$label.txt"
  python3 - "$label" >> "$R" <<'PY'
import json, sys
s = json.load(open("/tmp/st.json"))
r = {"row": sys.argv[1], "tps": s.get("decode_tps"), "steps": s.get("steps"), "k": s.get("draft_lengths") or s.get("k")}
if s.get("tokens_sha256"):  # the answer's tokens (run --stats-json, session 37 on): rows compare token for token
    r["sha"] = s["tokens_sha256"][:16]
print(json.dumps(r))
PY
  tail -1 "$R"
}
# (session 42) rows under the caller's environment, labelled by the caller: lcx LABEL (llama-completion), specx
# LABEL K (llama.cpp's MTP), and perfrow LABEL ARGS... (one `run --perf` process: its draft and step breakdown
# appended to $OUT/perf.jsonl); earlier sessions' scripts define their own, as they ran
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
perfrow() {  # $1: label, rest: run args
  local label=$1; shift
  timeout 90 python3 -m gguf_mtp_cli.main run "$M" -f /tmp/p.txt -n 256 -c 4096 -ngl 99 \
    "$@" --perf --stats-json /tmp/perf.json --force > /dev/null 2>/tmp/perf-err.txt || tail -3 /tmp/perf-err.txt
  python3 -c "import json, sys; s = json.load(open('/tmp/perf.json')); print(json.dumps({'row': sys.argv[1], 'tps': s['decode_tps'], 'acceptance_at': s['acceptance_at'], 'sha': s.get('tokens_sha256', '')[:16], **s['breakdown']}))" \
    "$label" | tee -a "$OUT/perf.jsonl"
}
