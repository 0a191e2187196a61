#!/usr/bin/env bash
# Vulkan vs CPU on the shipped trained model (examples/tiny-qwen35-mtp): the greedy tokens of a Vulkan
# build of llama-cpp-python (all layers offloaded, -ngl 99) must equal the CPU build's, plain, with a fixed
# draft length and with `auto`. Without a GPU it runs on Mesa's software driver lavapipe (Debian:
# mesa-vulkan-drivers).
#
#   CMAKE_ARGS="-DGGML_VULKAN=on" VENV=/path/vkenv bash scripts/setup.sh    # the Vulkan build
#   VK_VENV=/path/vkenv bash scripts/vulkan-check.sh                        # this check
#
# env: VK_VENV (required), CPU_VENV (default .venv: the reference build), REF_NGL (-ngl for the reference,
#      default 0; with a CUDA build as CPU_VENV and REF_NGL=99 the comparison is Vulkan vs CUDA on one GPU),
#      REF_NAME (its label, default cpu), N (tokens, 64), DRAFT (--spec-draft-n-max, 3),
#      MODES (default "plain fixed auto": --no-mtp, --spec-draft-n-max DRAFT, --spec-draft-n-max auto),
#      PROMPTS (how many of the 16 reference prompts the API part generates; default all),
#      GGUF_MTP_DEVICE_SAMPLING (auto, off or on: where sampler chains run, in both builds; see docs/devices.md),
#      OUTTYPE (convert --outtype, default f32: a bf16 trunk makes the CPU round activations to bf16 in
#      its dot products while Vulkan keeps them f32, which flips greedy near-ties: measured 2 of 16
#      reference prompts diverge at top-2 logit gaps of 0.007 and 0.021; f32 gives 16 of 16 identical),
#      WORK (scratch dir, default a fresh temp dir). VK_ICD_FILENAMES / VK_DRIVER_FILES, if set, pick the
#      Vulkan driver; otherwise lavapipe is used (with GGML_VK_VISIBLE_DEVICES=0: ggml-vulkan ignores
#      CPU-type devices unless named).
# Two comparisons: `gguf-mtp run` stdout (one prompt, CLI path) and the token ids of the reference prompts
# through MTPSession. Each line says where the target's sampler chain ran (device: inside llama.cpp's decode
# graph; host: from the logits). A run that dies (a signal: heap corruption) is reported and fails the check.
# Exit status 0 only when every run finished and all tokens are identical.
set -euo pipefail
cd "$(dirname "$0")/.."
CPU_VENV="${CPU_VENV:-.venv}"
VK_VENV="${VK_VENV:?set VK_VENV to a venv holding a Vulkan build of llama-cpp-python}"
REF_NGL="${REF_NGL:-0}"
REF_NAME="${REF_NAME:-cpu}"
N="${N:-64}"
DRAFT="${DRAFT:-3}"
MODES="${MODES:-plain fixed auto}"
PROMPTS="${PROMPTS:-0}"
WORK="${WORK:-$(mktemp -d)}"
mkdir -p "$WORK"
for m in $MODES; do
    case "$m" in plain|fixed|auto) ;; *) echo "vulkan-check: MODES: '$m' is not plain, fixed or auto" >&2; exit 2 ;; esac
done

# shellcheck source=scripts/lavapipe-env.sh
source scripts/lavapipe-env.sh vulkan-check
echo "vulkan-check: driver ${VK_DRIVER_FILES:-$VK_ICD_FILENAMES}; GGUF_MTP_DEVICE_SAMPLING=${GGUF_MTP_DEVICE_SAMPLING:-auto}; modes $MODES; work dir $WORK" >&2

MODEL="$WORK/tiny.gguf"
"$CPU_VENV/bin/gguf-mtp" convert examples/tiny-qwen35-mtp --outfile "$MODEL" --force --quiet \
    --outtype "${OUTTYPE:-f32}" >/dev/null
PROMPT="$("$CPU_VENV/bin/python" -c 'import json; print(json.load(open("examples/tiny-qwen35-mtp/reference.json"))["prompts"][3], end="")')"

died() {  # exit status of a run -> what the summary says
    if [ "$1" -gt 128 ]; then echo "DIED (signal $(( $1 - 128 )): $(kill -l $(( $1 - 128 )) 2>/dev/null || echo '?'))"
    else echo "FAILED (exit $1)"; fi
}

# 1. The Vulkan build must see a Vulkan device (llama.cpp's own log).
rc=0
GGUF_MTP_LLAMA_LOG=raw "$VK_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n 1 -ngl 99 --no-mtp \
    >/dev/null 2>"$WORK/vk-devices.log" || rc=$?
if [ "$rc" != 0 ]; then
    grep -v "^llama_graph_n_input_tensors\|^graph_reserve\|^sched_reserve" "$WORK/vk-devices.log" | tail -n 5 >&2
    echo "vulkan-check: the first Vulkan run: $(died "$rc")"; echo "vulkan-check: FAILED"; exit 1
fi
grep -E "^devices: .*Vulkan0|ggml_vulkan: [0-9]+ = |offloaded [0-9]+/[0-9]+ layers|Vulkan0 model buffer" "$WORK/vk-devices.log" >&2 ||
    { echo "vulkan-check: no Vulkan device in the log ($WORK/vk-devices.log)" >&2; exit 1; }

# 2. gguf-mtp run: stdout of the reference and Vulkan, for each mode.
fail=0
for mode in $MODES; do
    case "$mode" in
        plain) extra=(--no-mtp) ;;
        fixed) extra=(--spec-draft-n-max "$DRAFT" --require-mtp) ;;
        auto) extra=(--spec-draft-n-max auto --require-mtp) ;;
    esac
    rc_ref=0 rc_vk=0
    "$CPU_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n "$N" -ngl "$REF_NGL" "${extra[@]}" \
        --stats-json "$WORK/cpu-$mode.json" --force >"$WORK/cpu-$mode.txt" 2>"$WORK/cpu-$mode.err" || rc_ref=$?
    "$VK_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n "$N" -ngl 99 "${extra[@]}" \
        --stats-json "$WORK/vk-$mode.json" --force >"$WORK/vk-$mode.txt" 2>"$WORK/vk-$mode.err" || rc_vk=$?
    if [ "$rc_ref" != 0 ] || [ "$rc_vk" != 0 ]; then
        for fl in cpu vk; do
            rc=$([ "$fl" = cpu ] && echo "$rc_ref" || echo "$rc_vk")
            [ "$rc" = 0 ] || { echo "run $mode $fl: $(died "$rc"); its stderr ends:"; tail -n 3 "$WORK/$fl-$mode.err"; }
        done
        fail=1
        continue
    fi
    if cmp -s "$WORK/cpu-$mode.txt" "$WORK/vk-$mode.txt"; then same=identical; else same=DIFFERENT; fail=1; fi
    for fl in cpu vk; do
        where=device; grep -q "^note: sampling on the host" "$WORK/$fl-$mode.err" && where=host
        "$CPU_VENV/bin/python" - "$WORK/$fl-$mode.json" "$([ "$fl" = cpu ] && echo "$REF_NAME" || echo vk)" \
            "$mode" "$same" "$where" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"run {sys.argv[3]:5s} {sys.argv[2]:4s}: {s['emitted']} tokens, acceptance {100 * s['acceptance']:.1f}% "
      f"({s['accepted']}/{s['drafted']}), {s['decode_tps']:.1f} t/s decode, {s['prompt_tps']:.0f} t/s prompt, "
      f"sampling on the {sys.argv[5]}; output {sys.argv[4]}")
EOF
    done
done

# 3. Token ids of the reference prompts, for each mode, through the Python API.
gen() {  # venv ngl out
    "$1/bin/python" - "$MODEL" "$2" "$3" "$N" "$DRAFT" "$PROMPTS" "$MODES" <<'EOF'
import llama_cpp.llama_cpp  # noqa: F401  (llama.cpp before numpy)
import json, sys, time
from gguf_mtp.runtime import MTPSession
model, ngl, out, n, draft, n_prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
prompts = json.load(open("examples/tiny-qwen35-mtp/reference.json"))["prompts"]
prompts = prompts[:n_prompts] if n_prompts > 0 else prompts
res = {}
for mode in sys.argv[7].split():
    kw = {"plain": {"mtp": False}, "fixed": {"mtp": "auto"}, "auto": {"mtp": "auto", "adaptive": True}}[mode]
    with MTPSession(model, n_draft=draft, n_ctx=512, n_gpu_layers=ngl, **kw) as s:
        t = time.perf_counter()
        toks = [s.generate(p, max_tokens=n).tokens for p in prompts]
        dt = time.perf_counter() - t
        st = s.stats
        where = "device" if s.engine.tsampler.on_device else "host"
    res[mode] = {"tokens": toks, "acceptance": st.acceptance, "accepted": st.accepted, "drafted": st.drafted,
                 "tokens_per_s": sum(map(len, toks)) / dt, "sampling": where}
json.dump(res, open(out, "w"))
EOF
}
api=1
for side in ref vk; do
    rc=0
    if [ "$side" = ref ]; then gen "$CPU_VENV" "$REF_NGL" "$WORK/cpu-tokens.json" || rc=$?
    else gen "$VK_VENV" 99 "$WORK/vk-tokens.json" || rc=$?; fi
    [ "$rc" = 0 ] || { echo "api $([ "$side" = ref ] && echo "$REF_NAME" || echo vk): $(died "$rc")"; fail=1; api=0; }
done
[ "$api" = 1 ] && { "$CPU_VENV/bin/python" - "$WORK/cpu-tokens.json" "$WORK/vk-tokens.json" "$REF_NAME" <<'EOF' || fail=1; }
import json, sys
cpu, vk = (json.load(open(p)) for p in sys.argv[1:3])
ok = True
for mode in cpu:
    a, b = cpu[mode]["tokens"], vk[mode]["tokens"]
    diff = [f"{i}@{next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))}"
            for i, (x, y) in enumerate(zip(a, b)) if x != y]  # prompt@first differing step
    ok &= not diff and len(a) == len(b)
    for name, r in ((sys.argv[3], cpu[mode]), ("vk", vk[mode])):
        print(f"api {mode:5s} {name:4s}: {len(r['tokens'])} prompts, {sum(map(len, r['tokens']))} tokens, "
              f"acceptance {100 * r['acceptance']:.1f}% ({r['accepted']}/{r['drafted']}), {r['tokens_per_s']:.1f} t/s, "
              f"sampling on the {r['sampling']}; tokens {'identical' if not diff else 'DIFFERENT (prompt@step) ' + ' '.join(diff)}")
# greedy speculative decoding emits what plain decoding does
same_modes = all(r[m]["tokens"] == r[next(iter(r))]["tokens"] for r in (cpu, vk) for m in r)
print(f"every mode emits the same tokens on each backend: {same_modes}")
sys.exit(0 if ok and same_modes else 1)
EOF
if [ "$fail" = 0 ]; then echo "vulkan-check: OK (Vulkan tokens == $REF_NAME tokens)"; else echo "vulkan-check: FAILED"; fi
exit "$fail"
