#!/usr/bin/env bash
# Vulkan vs CPU on the shipped trained model (examples/tiny-qwen35-mtp): the greedy tokens of a Vulkan
# build of llama-cpp-python (all layers offloaded, -ngl 99) must equal the CPU build's, with and without
# the MTP head. Without a GPU it runs on Mesa's software driver lavapipe (Debian: mesa-vulkan-drivers).
#
#   CMAKE_ARGS="-DGGML_VULKAN=on" VENV=/path/vkenv bash scripts/setup.sh    # the Vulkan build
#   VK_VENV=/path/vkenv bash scripts/vulkan-check.sh                        # this check
#
# env: VK_VENV (required), CPU_VENV (default .venv: the reference build), REF_NGL (-ngl for the reference,
#      default 0; with a CUDA build as CPU_VENV and REF_NGL=99 the comparison is Vulkan vs CUDA on one GPU),
#      REF_NAME (its label, default cpu), N (tokens, 64), DRAFT (--spec-draft-n-max, 3),
#      OUTTYPE (convert --outtype, default f32: a bf16 trunk makes the CPU round activations to bf16 in
#      its dot products while Vulkan keeps them f32, which flips greedy near-ties: measured 2 of 16
#      reference prompts diverge at top-2 logit gaps of 0.007 and 0.021; f32 gives 16 of 16 identical),
#      WORK (scratch dir, default a fresh temp dir). VK_ICD_FILENAMES / VK_DRIVER_FILES, if set, pick the
#      Vulkan driver; otherwise lavapipe is used (with GGML_VK_VISIBLE_DEVICES=0: ggml-vulkan ignores
#      CPU-type devices unless named).
# Two comparisons: `gguf-mtp run` stdout (one prompt, CLI path) and the token ids of every reference
# prompt through MTPSession. Exit status 0 only when all of them are identical.
set -euo pipefail
cd "$(dirname "$0")/.."
CPU_VENV="${CPU_VENV:-.venv}"
VK_VENV="${VK_VENV:?set VK_VENV to a venv holding a Vulkan build of llama-cpp-python}"
REF_NGL="${REF_NGL:-0}"
REF_NAME="${REF_NAME:-cpu}"
N="${N:-64}"
DRAFT="${DRAFT:-3}"
WORK="${WORK:-$(mktemp -d)}"
mkdir -p "$WORK"

if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]; then
    LVP="$(ls /usr/share/vulkan/icd.d/lvp_icd."$(uname -m)".json /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -n 1 || true)"
    [ -n "$LVP" ] || { echo "vulkan-check: lavapipe not found (apt-get install mesa-vulkan-drivers)" >&2; exit 2; }
    export VK_ICD_FILENAMES="$LVP" VK_DRIVER_FILES="$LVP"  # old and new loader names
    # ggml-vulkan skips CPU-type devices (lavapipe is one) unless they are named explicitly
    export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
fi
echo "vulkan-check: driver ${VK_DRIVER_FILES:-$VK_ICD_FILENAMES}; work dir $WORK" >&2

MODEL="$WORK/tiny.gguf"
"$CPU_VENV/bin/gguf-mtp" convert examples/tiny-qwen35-mtp --outfile "$MODEL" --force --quiet \
    --outtype "${OUTTYPE:-f32}" >/dev/null
PROMPT="$("$CPU_VENV/bin/python" -c 'import json; print(json.load(open("examples/tiny-qwen35-mtp/reference.json"))["prompts"][3], end="")')"

# 1. The Vulkan build must see a Vulkan device (llama.cpp's own log).
GGUF_MTP_LLAMA_LOG=raw "$VK_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n 1 -ngl 99 --no-mtp \
    >/dev/null 2>"$WORK/vk-devices.log" || { cat "$WORK/vk-devices.log" >&2; exit 1; }
grep -E "^devices: .*Vulkan0|ggml_vulkan: [0-9]+ = |offloaded [0-9]+/[0-9]+ layers|Vulkan0 model buffer" "$WORK/vk-devices.log" >&2 ||
    { echo "vulkan-check: no Vulkan device in the log ($WORK/vk-devices.log)" >&2; exit 1; }

# 2. gguf-mtp run: stdout of CPU and Vulkan, plain and speculative.
fail=0
for mode in plain mtp; do
    if [ "$mode" = plain ]; then extra=(--no-mtp); else extra=(--spec-draft-n-max "$DRAFT" --require-mtp); fi
    "$CPU_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n "$N" -ngl "$REF_NGL" "${extra[@]}" \
        --stats-json "$WORK/cpu-$mode.json" >"$WORK/cpu-$mode.txt" 2>/dev/null
    "$VK_VENV/bin/gguf-mtp" run "$MODEL" -p "$PROMPT" -n "$N" -ngl 99 "${extra[@]}" \
        --stats-json "$WORK/vk-$mode.json" >"$WORK/vk-$mode.txt" 2>/dev/null
    if cmp -s "$WORK/cpu-$mode.txt" "$WORK/vk-$mode.txt"; then same=identical; else same=DIFFERENT; fail=1; fi
    for fl in cpu vk; do
        "$CPU_VENV/bin/python" - "$WORK/$fl-$mode.json" "$([ $fl = cpu ] && echo "$REF_NAME" || echo vk)" "$mode" "$same" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"run {sys.argv[3]:5s} {sys.argv[2]:4s}: {s['emitted']} tokens, acceptance {100 * s['acceptance']:.1f}% "
      f"({s['accepted']}/{s['drafted']}), {s['decode_tps']:.1f} t/s decode, {s['prompt_tps']:.0f} t/s prompt; "
      f"output {sys.argv[4]}")
EOF
    done
done

# 3. Token ids of every reference prompt, plain and speculative, through the Python API.
gen() {  # venv ngl out
    "$1/bin/python" - "$MODEL" "$2" "$3" "$N" "$DRAFT" <<'EOF'
import llama_cpp.llama_cpp  # noqa: F401  (llama.cpp before numpy)
import json, sys, time
from gguf_mtp.runtime import MTPSession
model, ngl, out, n, draft = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
prompts = json.load(open("examples/tiny-qwen35-mtp/reference.json"))["prompts"]
res = {}
for mode, mtp in (("plain", False), ("mtp", "auto")):
    with MTPSession(model, mtp=mtp, n_draft=draft, n_ctx=512, n_gpu_layers=ngl) as s:
        t = time.perf_counter()
        toks = [s.generate(p, max_tokens=n).tokens for p in prompts]
        dt = time.perf_counter() - t
        st = s.stats
    res[mode] = {"tokens": toks, "acceptance": st.acceptance, "accepted": st.accepted, "drafted": st.drafted,
                 "tokens_per_s": sum(map(len, toks)) / dt}
json.dump(res, open(out, "w"))
EOF
}
gen "$CPU_VENV" "$REF_NGL" "$WORK/cpu-tokens.json"
gen "$VK_VENV" 99 "$WORK/vk-tokens.json"
"$CPU_VENV/bin/python" - "$WORK/cpu-tokens.json" "$WORK/vk-tokens.json" "$REF_NAME" <<'EOF' || fail=1
import json, sys
cpu, vk = (json.load(open(p)) for p in sys.argv[1:3])
ok = True
for mode in ("plain", "mtp"):
    a, b = cpu[mode]["tokens"], vk[mode]["tokens"]
    diff = [f"{i}@{next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))}"
            for i, (x, y) in enumerate(zip(a, b)) if x != y]  # prompt@first differing step
    ok &= not diff and len(a) == len(b)
    for name, r in ((sys.argv[3], cpu[mode]), ("vk", vk[mode])):
        print(f"api {mode:5s} {name:4s}: {len(r['tokens'])} prompts, {sum(map(len, r['tokens']))} tokens, "
              f"acceptance {100 * r['acceptance']:.1f}% ({r['accepted']}/{r['drafted']}), {r['tokens_per_s']:.1f} t/s; "
              f"tokens {'identical' if not diff else 'DIFFERENT (prompt@step) ' + ' '.join(diff)}")
same_modes = cpu["plain"]["tokens"] == cpu["mtp"]["tokens"] and vk["plain"]["tokens"] == vk["mtp"]["tokens"]
print(f"speculative == plain on each backend: {same_modes}")
sys.exit(0 if ok and same_modes else 1)
EOF
if [ "$fail" = 0 ]; then echo "vulkan-check: OK (Vulkan tokens == $REF_NAME tokens)"; else echo "vulkan-check: FAILED"; fi
exit "$fail"
