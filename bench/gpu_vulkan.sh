#!/usr/bin/env bash
# Vulkan beside CUDA on one NVIDIA GPU, on a machine without network (the device tool): build a Vulkan and
# a CUDA llama-cpp-python from the trimmed sdist at the same time, check each with gguf_mtp/backends.py
# (the check setup.sh runs, here with --require-device), run scripts/vulkan-check.sh (Vulkan against CUDA,
# greedy tokens of the trained tiny model: plain, fixed k and auto; sampler chains as shipped, then forced into
# the decode graph), then bench/run.py on both on the same GGUF.
#   bash bench/gpu_vulkan.sh all     # everything (~8-9 min on 16 cores; what does not fit in END_S is skipped)
#   bash bench/gpu_vulkan.sh check   # builds + backend checks + vulkan-check only
#   bash bench/gpu_vulkan.sh bench   # builds + backend checks + the two benchmarks only
# Needs, as bench/gpu.sh, .carry/llama_cpp_python-0.3.36-trim.tar.gz and .carry/whl/{gguf,diskcache}-*.whl,
# and the Debian 12 packages in .gl/ (3.7 MB): the loader libvulkan1 (+ libglvnd0 libegl1 libgl1 libglx0
# libopengl0 libgles2, as the device README brings them), unpacked into /; and for the build libvulkan-dev
# glslc libshaderc1 spirv-headers, unpacked into /tmp/vk. Debian 12's headers (1.3.239) need our shim
# scripts/vulkan-compat, added here as setup.sh adds it; its glslc (shaderc 2023.2) has no cooperative-matrix,
# integer-dot or bf16 shader extensions, so Vulkan runs without its tensor-core / int8 matmul shaders (slower
# prompts than a build with a current Vulkan SDK). Results in $OUT (7 files): summary.txt,
# vulkan-check.txt (as shipped), vulkan-check-on.txt (GGUF_MTP_DEVICE_SAMPLING=on), run-{cuda,vk}.{txt,json};
# a failed build leaves its log there.
# env: TMPR (scratch root, /tmp), END_S (580: stages are cut to end by then), BENCH_GB (2), N (128),
#      WHEEL_CUDA / WHEEL_VK (use these wheels instead of building: a dry run of the later stages).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/gguf-mtp-out}"
TMPR="${TMPR:-/tmp}"  # scratch root: builds, sites, the bench model
mkdir -p "$OUT"
MODE="${1:-all}"
case "$MODE" in all|check|bench) ;; *) echo "usage: bash bench/gpu_vulkan.sh all|check|bench" >&2; exit 2 ;; esac
END_S="${END_S:-580}"  # the whole run ends by then (the device tool stops a command at 600 s)
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $(( END_S - ($(date +%s) - T0) )); }
late() { [ "$(left)" -lt "$2" ] && { say "skipped $1: less than $2 s left"; return 0; }; return 1; }
REPO="$PWD"
VK="$TMPR/vk/usr"
MA=x86_64-linux-gnu

# 1. Vulkan: the loader (into /, as the device README says) and the build tools (elsewhere); a dry run skips it
[ -n "${WHEEL_CUDA:-}${WHEEL_VK:-}" ] || for p in libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2; do
    f=$(ls .gl/${p}_*.deb 2>/dev/null | head -n 1) && [ -n "$f" ] && dpkg -x "$f" /
done
[ -n "${WHEEL_CUDA:-}${WHEEL_VK:-}" ] || ldconfig
mkdir -p $TMPR/vk
[ -n "${WHEEL_CUDA:-}${WHEEL_VK:-}" ] || for p in libvulkan1 libvulkan-dev glslc libshaderc1 spirv-headers; do  # libvulkan1: the dev symlink points at it
    f=$(ls .gl/${p}_*.deb 2>/dev/null | head -n 1) || true
    [ -n "$f" ] || { echo "missing .gl/${p}_*.deb" >&2; exit 2; }
    dpkg -x "$f" $TMPR/vk
done
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$NV_ICD" ]; then
    export VK_DRIVER_FILES="$NV_ICD" VK_ICD_FILENAMES="$NV_ICD"  # new and old loader names
fi
say "loader: $(ldconfig -p | grep -m1 'libvulkan.so.1' || echo none); driver: ${VK_DRIVER_FILES:-default}; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
LD_LIBRARY_PATH="$VK/lib/$MA" "$VK/bin/glslc" --version | head -n 1 | sed 's/^/glslc: /' | tee -a "$OUT/summary.txt"

# 2. both builds at once (each with every core: the serial parts overlap)
# the build backend, where the machine's Python lacks it (carried as wheels: .carry/whl/scikit_build_core, pathspec)
SBC=""
if ! python3 -c "import scikit_build_core" 2>/dev/null; then
    SBC=$TMPR/sbc && rm -rf "$SBC" && python3 -m pip install -q --no-index --no-deps --target "$SBC" \
        .carry/whl/scikit_build_core-*.whl .carry/whl/pathspec-*.whl
fi
build() {  # name cmake-args
    local src=$TMPR/b-$1
    rm -rf "$src" $TMPR/wheel-$1 && mkdir -p "$src" && tar xzf .carry/llama_cpp_python-0.3.36-trim.tar.gz -C "$src"
    ( cd "$src"/llama_cpp_python-0.3.36 && CMAKE_ARGS="$2" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        LD_LIBRARY_PATH="$VK/lib/$MA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONPATH="${SBC:+$SBC}" \
        python3 -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir -w $TMPR/wheel-$1 . ) > "$OUT/build-$1.log" 2>&1
}
CUDA_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=off"
VK_ARGS="-DGGML_VULKAN=on -DLLAVA_BUILD=off -DVulkan_INCLUDE_DIR=$VK/include -DVulkan_LIBRARY=$VK/lib/$MA/libvulkan.so \
-DVulkan_GLSLC_EXECUTABLE=$VK/bin/glslc -DSPIRV-Headers_DIR=$VK/share/cmake/SPIRV-Headers \
-DCMAKE_CXX_FLAGS=-I$REPO/scripts/vulkan-compat/include"
if [ -n "${WHEEL_CUDA:-}${WHEEL_VK:-}" ]; then
    for b in cuda vk; do
        w=WHEEL_${b^^}; rm -rf $TMPR/wheel-$b && mkdir -p $TMPR/wheel-$b && cp "${!w}" $TMPR/wheel-$b/
    done
else
    say "building cuda and vulkan wheels"
    ( build cuda "$CUDA_ARGS"; echo $? > $TMPR/rc-cuda; say "cuda build done (rc $(cat $TMPR/rc-cuda))" ) &
    ( build vk "$VK_ARGS"; echo $? > $TMPR/rc-vk; say "vulkan build done (rc $(cat $TMPR/rc-vk))" ) &
    wait
    for b in cuda vk; do
        if [ "$(cat $TMPR/rc-$b)" != 0 ]; then tail -n 40 "$OUT/build-$b.log"; say "$b build FAILED"; exit 1; fi
        grep -E "not supported by glslc|supported by glslc|CUDA Toolkit found|Including .* backend" "$OUT/build-$b.log" |
            sed "s/^/$b build: /" >> "$OUT/summary.txt"
        mv "$OUT/build-$b.log" "$TMPR/"  # the device tool brings back 8 files at most
    done
fi

# 3. one "venv" per build (site folder + wrappers), as scripts/vulkan-check.sh expects
for b in cuda vk; do
    site=$TMPR/site-$b env=$TMPR/venv-$b
    rm -rf "$site" "$env" && mkdir -p "$env/bin"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/*.whl $TMPR/wheel-$b/llama_cpp_python-*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" .
    printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "$@"\n' "$site" > "$env/bin/python"
    printf '#!/bin/sh\nPYTHONPATH=%s exec python3 -m gguf_mtp_cli.main "$@"\n' "$site" > "$env/bin/gguf-mtp"
    chmod +x "$env/bin/python" "$env/bin/gguf-mtp"
done
# the check setup.sh runs before caching a wheel, here with a device required
python3 gguf_mtp/backends.py check-wheel $TMPR/wheel-vk/llama_cpp_python-*.whl --cmake-args="$VK_ARGS" --require-device 2>&1 | tee -a "$OUT/summary.txt"
python3 gguf_mtp/backends.py check-wheel $TMPR/wheel-cuda/llama_cpp_python-*.whl --cmake-args="$CUDA_ARGS" --require-device 2>&1 | tee -a "$OUT/summary.txt"
python3 gguf_mtp/backends.py check-wheel $TMPR/wheel-cuda/llama_cpp_python-*.whl --cmake-args="-DGGML_VULKAN=on" 2>&1 | tee -a "$OUT/summary.txt"  # must refuse
for b in cuda vk; do $TMPR/venv-$b/bin/gguf-mtp run --list-devices 2>&1 | sed "s/^/$b: /" | tee -a "$OUT/summary.txt"; done
ls -la $TMPR/wheel-*/ | tee -a "$OUT/summary.txt"

# 4. Vulkan vs CUDA on the trained tiny model, plain, fixed k and auto: identical greedy tokens? acceptance?
#    First as shipped (on Vulkan the sampler chains run on the host: docs/upstream/vulkan-reserve-after-decode.md),
#    then with GGUF_MTP_DEVICE_SAMPLING=on (chains in the decode graph on both): does NVIDIA's driver survive
#    what crashes lavapipe? A failure of that second pass is a finding, not a broken script.
if [ "$MODE" != bench ]; then
    for ds in auto on; do
        late "vulkan-check ($ds)" 60 && continue
        f="$OUT/vulkan-check.txt"; [ "$ds" = auto ] || f="$OUT/vulkan-check-$ds.txt"
        say "vulkan-check (Vulkan vs CUDA, -ngl 99 both, GGUF_MTP_DEVICE_SAMPLING=$ds)"
        GGUF_MTP_DEVICE_SAMPLING=$ds CPU_VENV=$TMPR/venv-cuda REF_NGL=99 REF_NAME=cuda VK_VENV=$TMPR/venv-vk \
            WORK=$TMPR/vkcheck-$ds timeout "$(( $(left) < 200 ? $(left) : 200 ))" bash scripts/vulkan-check.sh 2>&1 | tee "$f"
        say "vulkan-check ($ds) exit ${PIPESTATUS[0]}"
    done
fi

# 5. bench/run.py on both backends, the same generated GGUF
if [ "$MODE" != check ]; then
    W=$TMPR/gguf-mtp-bench GB="${BENCH_GB:-2}"
    for b in cuda vk; do
        late "bench $b" 60 && continue
        src=(--make "$GB"); [ "$b" = vk ] && [ -f "$W/bench-$GB-0.15-bundled.gguf" ] && src=(--model "$W/bench-$GB-0.15-bundled.gguf")
        say "bench $b (${src[*]})"
        timeout "$(( $(left) < 200 ? $(left) : 200 ))" $TMPR/venv-$b/bin/python -m bench.run "${src[@]}" --ngl 99 --threads "$(nproc)" -n "${N:-128}" \
            --drafts 1 2 3 --repeats 2 --no-memory --workdir "$W" --out "$OUT/run-$b.json" 2>&1 | tee "$OUT/run-$b.txt"
        say "bench $b exit ${PIPESTATUS[0]}"
    done
fi
say "done"
