#!/usr/bin/env bash
# GPU verification and benchmarks on a machine without network (the device tool). One llama.cpp build, from the
# llama.cpp source that llama-cpp-python 0.3.36 vendors, with shared libraries: llama.cpp's own tools
# (llama-completion, llama-speculative-simple) and gguf-mtp (through LLAMA_CPP_LIB_PATH) run the same code.
#
#   bash bench/gpu.sh all        # ONE command: build + benchmark models + side-by-side benchmark -> $OUT
#                                #   (table side-by-side.txt, side-by-side.json; plot it here: python -m bench.plot)
#   bash bench/gpu.sh build      # only the build (~4.5 min on 16 cores)
#   bash bench/gpu.sh test       # tests/test_runtime.py, test_rollback.py, test_tiny_model.py on the GPU
#   bash bench/gpu.sh bench [SIZE_GB] [HEAD_NOISE]   # bench/run.py (prompt cost, memory)
#   bash bench/gpu.sh lcpp-server                    # also llama-server, for `serve`
#   bash bench/gpu.sh serve [SIZE_GB] [HEAD_NOISE]   # bench/serve.py, against llama-server if built
#   bash bench/gpu.sh qwen3next [SIZE_GB]   # bench/qwen3next.py: rollback strategies on a Qwen3-Next-shaped model
#   bash bench/gpu.sh multi [dense,moe,big]   # 2 GPUs: placements with and without MTP (bench/multi_gpu.py)
#   bash bench/gpu.sh kernels [9b:q8_0]   # where a decode's GPU time goes, kernel by kernel, under ncu (PHASES,
#                                         # DRAFT_VOCAB): bench/gpu_kernels.py
#   bash bench/gpu.sh timeline [9b:q8_0]  # a traced answer a row, the GPU's idle time by transition and each
#                                         # call's kernels (bench/gpu_timeline.py; TIMELINE_ROWS, default
#                                         # "0 2 2:GGML_CUDA_ARGMAX_SPLIT=0": k, then a row's environment;
#                                         # TIMELINE_N tokens, default 64; DRAFT_VOCAB as for kernels)
#   bash bench/gpu.sh backend-ops    # llama.cpp's test-backend-ops against this build: OPS (default ARGMAX)
#                                    # checked against the CPU, then timed (needs tests/test-backend-ops.cpp: .carry)
#   bash bench/gpu.sh serve-shaped   # serve vs llama-server (draft-mtp, plain) at 1 and 4 clients, same model
#   bash bench/gpu.sh oneshot ["noisy perfect"]   # every row its own process, one answer (bench/oneshot.py), on
#                                                 # models of LAYERS (default 32) at WIDTHS
#   bash bench/gpu.sh shapes ["27b:q8_0,q4_k_m 35b-a3b:q8_0"]   # the same one-shot rows on release shapes
#                                                 # (bench/models.py SHAPES: template + inflate), noisy heads
#                                                 # (HEADS="noisy perfect" for both), with --perf rows;
#                                                 # DRAFT_VOCAB=N: the models with a draft vocabulary of N tokens
#                                                 # (patch 0002-draft-vocab), rows with it off beside;
#                                                 # PERF= (empty): no --perf rows; ONESHOT_ARGS: more
#                                                 # oneshot.py options (--repeat 3, --env-row NAME=VALUE,
#                                                 # --versus best auto: two rows in alternating processes);
#                                                 # CHAIN_BENCH="2 3 4": then bench/mtp_chain.py at each k
#                                                 # (GGUF_MTP_PATCHES=proposed: patch 0016, the chain); only the
#                                                 # HEADS asked for are made; DV_ONLY=1: only the draft-
#                                                 # vocabulary models (its rows "off" use GGUF_MTP_DRAFT_VOCAB=0);
#                                                 # DRAFT_HEAD=q5_0: each model with a draft LM head of that
#                                                 # type (labels end ", Q5_0 draft head"); MTP_TYPE=q4_0:
#                                                 # each with its MTP block at that type (", Q4_0 MTP block")
#
# Needs .carry/ (`bash scripts/make-carry.sh` makes it): llama_cpp_python-0.3.36-trim.tar.gz (the PyPI sdist; the trimmed copy must keep vendor/llama.cpp's
# CMakeLists.txt, cmake/, common/, ggml/, include/, src/, vendor/, licenses/, tools/ (CMakeLists.txt, completion/)
# and examples/ (CMakeLists.txt, speculative-simple/), and the llama_cpp/ Python package) and .carry/whl/{gguf,
# diskcache}-*.whl (`serve` also starlette, uvicorn, typer). Environment: OUT (results), CUDA=0 (a CPU build: how this script is tested without a GPU),
# GGUF_MTP_PATCHES (0: stock llama.cpp; 1, the default: patches/llama.cpp as setup.sh applies them; proposed: also
# patches/llama.cpp/proposed), LCPP (build folder; an existing build is reused), WORK (models), SITE and BDIR (Python packages, unpacked
# sdist), LAYERS, VOCAB, WIDTHS, NOISE, QUANT, THREADS, BUDGET (seconds for the whole of `all`, default 540), BUILD_EXTRA (more llama.cpp targets for `all`'s build, e.g. llama-server), SBS_ARGS (more side_by_side.py options, e.g. --no-tools).
set -euo pipefail
export PYTHONUNBUFFERED=1
T0=$SECONDS
OUT="${OUT:-/tmp/gguf-mtp-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SITE="${SITE:-/tmp/site}"
BDIR="${BDIR:-/tmp/b}"
SRC="$BDIR/llama_cpp_python-0.3.36"
LCPP="${LCPP:-/tmp/lcpp}"
CUDA="${CUDA:-1}"
WORK="${WORK:-/tmp/gguf-mtp-bench}"
NGL=99
[ "$CUDA" = 1 ] || NGL=0
py() { PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" LLAMA_CPP_BIN="$LCPP/bin" python3 "$@"; }
log() { echo "[$(( SECONDS - T0 ))s] $*"; }
# timeout with what is left of BUDGET: none left (a slow build) skips the step with a line instead of handing
# timeout a negative number
timeout_left() {
    local left=$1
    shift
    if [ "$left" -le 0 ]; then
        log "the time budget (BUDGET) was spent before this step: skipped"
        return 0
    fi
    timeout "$left" "$@"
}

patch_llama() {  # our patches (patches/llama.cpp, as scripts/setup.sh applies them): GGUF_MTP_PATCHES=0|1|proposed
    local mode="${GGUF_MTP_PATCHES:-1}" p list=()
    case "$mode" in
        0) log "llama.cpp patches: none (stock)"; return ;;
        1) list=(patches/llama.cpp/*.patch) ;;
        proposed) mapfile -t list < <(ls patches/llama.cpp/*.patch patches/llama.cpp/proposed/*.patch | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2) ;;
        *) echo "GGUF_MTP_PATCHES=$mode: use 0, 1 or proposed" >&2; exit 2 ;;
    esac
    for p in "${list[@]}"; do
        [ -f "$p" ] || continue
        if command -v patch >/dev/null; then
            patch -d "$SRC/vendor/llama.cpp" -p1 --forward --batch --fuzz=0 -s < "$p" || { echo "$p does not apply" >&2; exit 1; }
        else
            git -C "$SRC/vendor/llama.cpp" apply -p1 "$PWD/$p" 2>/dev/null || (cd "$SRC/vendor/llama.cpp" && git apply -p1 "$OLDPWD/$p") \
                || { echo "$p does not apply (no patch; git apply failed)" >&2; exit 1; }
        fi
        log "applied $p"
    done
}

one_model() {  # $1: SHAPE:TRUNK; the shape's model with a noisy head (DRAFT_VOCAB: with that draft vocabulary) into M,
              # made while llama.cpp builds
    deps
    SP="${1:-9b:q8_0}"
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models --workdir "$WORK" --shape "${SP%%:*}" \
        --trunks "${SP#*:}" --vocab "${VOCAB:-248320}" ${NOISE:+--noise "$NOISE"} --threads "$(nproc)" \
        --manifest "$WORK/models-${SP%%:*}.txt" > "$OUT/models.log" 2>&1 &
    MODELS=$!
    build
    wait "$MODELS" || { tail -20 "$OUT/models.log"; exit 1; }
    if [ -n "${DRAFT_VOCAB:-}" ]; then
        py -m bench.models --workdir "$WORK" --shape "${SP%%:*}" --trunks "${SP#*:}" --vocab "${VOCAB:-248320}" \
            ${NOISE:+--noise "$NOISE"} --draft-vocab "$DRAFT_VOCAB" --manifest "$WORK/models-${SP%%:*}.txt" \
            >> "$OUT/models.log" 2>&1 || { tail -20 "$OUT/models.log"; exit 1; }
        M="$(grep -m1 -i "^${SP%%:*} ${SP#*:}, noisy head.*, draft vocab $DRAFT_VOCAB=" "$WORK/models-${SP%%:*}.txt" | cut -d= -f2-)"
    else
        M="$(grep -m1 -i "^${SP%%:*} ${SP#*:}, noisy head" "$WORK/models-${SP%%:*}.txt" | cut -d= -f2-)"
    fi
}

deps() {  # llama-cpp-python's Python package (its libraries come from the llama.cpp build), gguf-mtp from here
    [ -d "$SRC" ] || { rm -rf "$BDIR" && mkdir -p "$BDIR" && tar xzf .carry/llama_cpp_python-0.3.36-trim.tar.gz -C "$BDIR" && patch_llama; }
    if [ ! -d "$SITE/llama_cpp" ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .carry/whl/*.whl
        cp -r "$SRC/llama_cpp" "$SITE/llama_cpp"
    fi
    ln -sfn "$PWD/gguf_mtp" "$SITE/gguf_mtp"  # no build step: the sources as they are
    ln -sfn "$PWD/cli" "$SITE/gguf_mtp_cli"
    ln -sfn "$PWD/tests" "$SITE/tests"  # tests.synthetic: the benchmarks' synthetic checkpoints
}

build() {  # $@: extra targets (llama-server)
    deps
    local targets=(llama-completion llama-speculative-simple "$@") missing=0 t
    for t in "${targets[@]}"; do [ -x "$LCPP/bin/$t" ] || missing=1; done
    if [ "$missing" = 0 ]; then
        log "llama.cpp build reused: $LCPP"
        return
    fi
    local args=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
                -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF)
    [ "$CUDA" = 1 ] && args+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    command -v ninja >/dev/null && args+=(-G Ninja)
    cmake -S "$SRC/vendor/llama.cpp" -B "$LCPP" "${args[@]}" > "$OUT/build.log" 2>&1
    cmake --build "$LCPP" -j "$(nproc)" --target "${targets[@]}" >> "$OUT/build.log" 2>&1 \
        || { tail -30 "$OUT/build.log"; exit 1; }
    log "built llama.cpp ($( [ "$CUDA" = 1 ] && echo CUDA || echo CPU )): $(ls "$LCPP/bin" | tr '\n' ' ')"
}

models() {  # $1: python (no llama.cpp needed: runs while it builds) | llama (the quantizer)
    local m=(--workdir "$WORK" --widths "${WIDTHS:-9b}" --layers "${LAYERS:-12}" --vocab "${VOCAB:-248320}"
             --noise "${NOISE:-0.06}" --quant "${QUANT:-Q4_K_M}" --stage "$1" ${DRAFT_HEAD:+--draft-head "$DRAFT_HEAD"})
    if [ "$1" = python ]; then
        PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models "${m[@]}" --threads 4
    else
        py -m bench.models "${m[@]}" --manifest "$WORK/models.txt"
    fi
}

case "${1:-}" in
all)
    deps
    log "models (python stage) in the background, llama.cpp build in the foreground"
    models python > "$OUT/models.log" 2>&1 &
    MODELS=$!
    build ${BUILD_EXTRA:-}
    wait "$MODELS" || { tail -20 "$OUT/models.log"; exit 1; }
    log "models: python stage done"
    models llama >> "$OUT/models.log" 2>&1 || { tail -20 "$OUT/models.log"; exit 1; }
    cat "$OUT/models.log"
    args=()
    while IFS= read -r line; do args+=(--model "$line"); done < "$WORK/models.txt"
    left=$(( ${BUDGET:-540} - (SECONDS - T0) ))
    log "side-by-side benchmark, $left s left"
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" timeout_left "$left" python3 -m bench.side_by_side "${args[@]}" \
        --bin "$LCPP/bin" --ngl $NGL ${THREADS:+--threads $THREADS} -n 128 --repeats 2 --tool-repeats 1 ${SBS_ARGS:-} \
        --out "$OUT/side-by-side.json" 2>&1 | tee "$OUT/side-by-side.txt" || log "side-by-side stopped early (time budget or error); the JSON keeps every finished model"
    log "done"
    ;;
build)
    build
    py -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'GPU offload:', llama_cpp.llama_supports_gpu_offload())"
    ;;
test)
    build
    # llama.cpp's libraries must load before any pytest plugin imports numpy (see gguf_mtp/__init__.py)
    cd "$(mktemp -d)" && mkdir examples && cp -r "$OLDPWD/tests" . && cp -r "$OLDPWD/examples/tiny-qwen35-mtp" examples/ &&
    GGUF_MTP_TEST_NGL=$NGL py -c "import llama_cpp.llama_cpp, sys, pytest; sys.exit(pytest.main(['-q', '-s', '-p', 'no:cacheprovider', 'tests/test_runtime.py', 'tests/test_rollback.py', 'tests/test_tiny_model.py']))" > "$OUT/gpu-tests.log" 2>&1 || true
    grep -E "passed|failed|acceptance|top-1|FAILED" "$OUT/gpu-tests.log" | tail -25
    ;;
bench)
    build
    py -m bench.run --make "${2:-8}" --head-noise "${3:-0.15}" --ngl $NGL --threads "$(nproc)" -n 128 --repeats 2 --workdir "$WORK" \
        --out "$OUT/run-gpu.json" 2>&1 | tee "$OUT/run-gpu.txt"
    ;;
lcpp-server)
    build llama-server
    ls -l "$LCPP/bin/llama-server"
    ;;
serve)
    # gguf-mtp serve (MTP on/off) vs llama-server (draft-mtp/plain, if lcpp-server ran) at 1/4/8 clients
    build
    LS=(); [ -x "$LCPP/bin/llama-server" ] && LS=(--llama-server "$LCPP/bin/llama-server")
    py -m bench.serve --make "${2:-8}" --head-noise "${3:-0.15}" --ngl $NGL --threads 4 -n 128 \
        --seconds "${SERVE_SECONDS:-20}" --draft "${SERVE_DRAFT:-3}" --workdir "$WORK" "${LS[@]}" \
        --out "$OUT/serve-gpu.json" 2>&1 | tee "$OUT/serve-gpu.txt"
    ;;
qwen3next)
    # plain vs MTP on a Qwen3-Next-shaped model (vocab 151936), every rollback strategy, perfect and ~70% head
    build
    py bench/qwen3next.py --make "${2:-6}" --ngl $NGL --threads "$(nproc)" -n 128 --repeats 2 --workdir "$WORK" \
        --out "$OUT/qwen3next-gpu.json" 2>&1 | tee "$OUT/qwen3next-gpu.txt"
    ;;
multi)  # 2 GPUs: one GPU vs layer split vs head on GPU 1, dense / MoE / a >80 GB MoE (bench/multi_gpu.py)
    build
    py -m bench.multi_gpu --devices CUDA0,CUDA1 --models "${2:-dense,moe,big}" --threads "$(nproc)" \
        --workdir /tmp/gguf-mtp-mgpu --out "$OUT/multi-gpu.json" 2>&1 | tee "$OUT/multi-gpu.txt"
    ;;
oneshot)  # $2: which heads, in order ("noisy perfect"); NOISE sets the noisy one's noise (default 0.06);
          # ONESHOT_ARGS: more oneshot.py options (--perf, --no-warmup-rows); BEFORE: an older package to compare
    deps
    L="${LAYERS:-32}"
    log "models ($L layers, python stage) in the background, llama.cpp build in the foreground"
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models --workdir "$WORK" \
        --widths "${WIDTHS:-9b}" --layers "$L" --vocab "${VOCAB:-248320}" --noise "${NOISE:-0.06}" --quant "" \
        --stage python --threads "$(nproc)" --manifest "$WORK/models.txt" > "$OUT/models.log" 2>&1 &
    MODELS=$!
    build
    wait "$MODELS" || { tail -20 "$OUT/models.log"; exit 1; }
    log "models done: $(tr '\n' ' ' < "$OUT/models.log")"
    args=()
    for h in ${2:-noisy perfect}; do args+=(--model "$(grep -m1 "$h head" "$WORK/models.txt")"); done
    left=$(( ${BUDGET:-540} - (SECONDS - T0) ))
    log "one-shot rows, $left s left"
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" timeout_left "$left" python3 -m bench.oneshot "${args[@]}" \
        --bin "$LCPP/bin" --ngl $NGL -n "${NPRED:-256}" --drafts ${DRAFTS:-1 2 3 4} ${BEFORE:+--before "$BEFORE"} \
        ${ONESHOT_ARGS:-} --out "$OUT/oneshot.json" 2>&1 \
        | tee "$OUT/oneshot.txt" || log "oneshot stopped early (time budget or error); the JSON keeps every finished row"
    log "done"
    ;;
shapes)  # $2: SHAPE:TRUNK[,TRUNK] ...; one-shot rows per model, in the order given
    deps
    SPECS="${2:-27b:q8_0,q4_k_m 35b-a3b:q8_0}"
    log "models (python stage) in the background, llama.cpp build in the foreground"
    (for sp in $SPECS; do
        PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models --workdir "$WORK" \
            --shape "${sp%%:*}" --trunks "${sp#*:}" --vocab "${VOCAB:-248320}" ${NOISE:+--noise "$NOISE"} \
            --heads "$(echo ${HEADS:-noisy} | tr ' ' ',')" ${DV_ONLY:+--draft-vocab-only} \
            ${DRAFT_HEAD:+--draft-head "$DRAFT_HEAD"} ${MTP_TYPE:+--mtp-type "$MTP_TYPE"} --threads "$(nproc)" \
            --manifest "$WORK/models-${sp%%:*}.txt" || exit 1
     done) > "$OUT/models.log" 2>&1 &
    MODELS=$!
    build
    wait "$MODELS" || { tail -20 "$OUT/models.log"; exit 1; }
    made="$(tr '\n' ' ' < "$OUT/models.log")"
    log "models done: ${made:-none in this stage (DV_ONLY: only the draft-vocabulary models, next)}"
    if [ -n "${DRAFT_VOCAB:-}" ]; then  # each model again with a draft vocabulary counted on what it answers and drafts
        for sp in $SPECS; do
            py -m bench.models --workdir "$WORK" --shape "${sp%%:*}" --trunks "${sp#*:}" --vocab "${VOCAB:-248320}" \
                ${NOISE:+--noise "$NOISE"} --draft-vocab "$DRAFT_VOCAB" --manifest "$WORK/models-${sp%%:*}.txt" \
                --heads "$(echo ${HEADS:-noisy} | tr ' ' ',')" ${DV_ONLY:+--draft-vocab-only} \
                ${DRAFT_HEAD:+--draft-head "$DRAFT_HEAD"} ${MTP_TYPE:+--mtp-type "$MTP_TYPE"} \
                >> "$OUT/models.log" 2>&1 || { tail -20 "$OUT/models.log"; exit 1; }
        done
        log "draft-vocabulary models done"
    fi
    args=()
    for sp in $SPECS; do
        for trunk in $(echo "${sp#*:}" | tr ',' ' '); do
            for h in ${HEADS:-noisy}; do
                if [ -n "${DRAFT_VOCAB:-}" ]; then
                    args+=(--model "$(grep -m1 -i "^${sp%%:*} ${trunk}, $h head.*, draft vocab $DRAFT_VOCAB=" "$WORK/models-${sp%%:*}.txt")")
                else
                    args+=(--model "$(grep -m1 -i "^${sp%%:*} ${trunk}, $h head ([0-9.]*)=\|^${sp%%:*} ${trunk}, $h head=" "$WORK/models-${sp%%:*}.txt")")
                fi
            done
        done
    done
    left=$(( ${BUDGET:-560} - (SECONDS - T0) ))
    log "one-shot rows, $left s left"
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" timeout_left "$left" python3 -m bench.oneshot "${args[@]}" \
        --bin "$LCPP/bin" --ngl $NGL -n "${NPRED:-256}" --drafts ${DRAFTS:-2 3 4} ${PERF---perf} \
        ${BEFORE:+--before "$BEFORE"} ${ONESHOT_ARGS:-} --out "$OUT/oneshot.json" 2>&1 \
        | tee "$OUT/oneshot.txt" || log "oneshot stopped early (time budget or error); the JSON keeps every finished row"
    if [ -n "${CHAIN_BENCH:-}" ]; then  # the chained decode alone (patch 0016, the chain): k separate decodes against one
        m="$(printf '%s\n' "${args[@]}" | grep -m1 'draft vocab' | cut -d= -f2-)"
        for k in $CHAIN_BENCH; do
            for embd in 1 0; do
                GGUF_MTP_CHAIN_EMBD=$embd py -m bench.mtp_chain "${m:-${args[1]#*=}}" -k "$k" -ngl $NGL --steps 200 \
                    2>&1 | sed "s/^/[k=$k, chain embd $embd] /" | tee -a "$OUT/mtp-chain.txt"
            done
        done
    fi
    log "done"
    ;;
timeline)  # $2: SHAPE:TRUNK (one model); one traced answer a row (bench/gpu_timeline.py: PyTorch's profiler)
    one_model "${2:-}"
    mkdir -p "$OUT/timeline"
    # torch's libraries after llama.cpp's abort the process (free(): invalid pointer: libggml-cuda's own copies of
    # libstdc++ symbols, loaded globally, serve them) unless the system libstdc++ is loaded first
    STDCXX="$(ldconfig -p | grep -m1 'libstdc++.so.6 ' | sed 's/.*=> //')"
    for row in ${TIMELINE_ROWS:-0 2 2:GGML_CUDA_ARGMAX_SPLIT=0}; do
        k="${row%%:*}"; envs=(); [ "$row" = "$k" ] || read -r -a envs <<< "${row#*:}"
        name="k$k$(printf -- '-%s' "${envs[@]}" | tr -c 'A-Za-z0-9_-' '_' | sed 's/-$//')"
        log "timeline $name"
        env "${envs[@]}" LD_PRELOAD="$STDCXX" PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" timeout 300 python3 -m bench.gpu_timeline \
            "$M" -k "$k" -n "${TIMELINE_N:-64}" -ngl $NGL --trace "$OUT/timeline/$name.json.gz" 2>&1 \
            | grep -v "^USDT\|^llama\|^load\|^print_info" | tee "$OUT/timeline/$name.txt" | tail -60 \
            || log "timeline $name failed (above)"
    done
    tar czf "$OUT/timeline.tgz" -C "$OUT" timeline && rm -rf "$OUT/timeline"  # one file: the device returns a few
    log "done"
    ;;
kernels)  # $2: SHAPE:TRUNK (one model); where a decode's GPU time goes, kernel by kernel (bench/gpu_kernels.py, ncu)
    one_model "${2:-}"
    NCU="$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)"
    [ -n "$NCU" ] || { echo "ncu (Nsight Compute) not found" >&2; exit 1; }
    mkdir -p "$OUT/kernels"
    for ph in ${PHASES:-plain verify-2 verify-3 verify-4 draft draft-3 draft-4}; do
        log "kernels: $ph"
        py -m bench.gpu_kernels "$M" --phase "$ph" -ngl $NGL --out "$OUT/kernels" > "$OUT/kernels/$ph.log" 2>&1 \
            || { log "$ph failed"; tail -5 "$OUT/kernels/$ph.log"; continue; }
        PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH="$LCPP/bin" timeout 120 "$NCU" --profile-from-start off --clock-control none \
            --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
            --log-file "$OUT/kernels/$ph.csv" python3 -m bench.gpu_kernels "$M" --phase "$ph" -ngl $NGL --profile \
            >> "$OUT/kernels/$ph.log" 2>&1 || { log "$ph: ncu failed"; tail -5 "$OUT/kernels/$ph.log"; }
    done
    py -m bench.gpu_kernels --summarize "$OUT/kernels" | tee "$OUT/kernels.txt"
    tar czf "$OUT/kernels.tgz" -C "$OUT" kernels && rm -rf "$OUT/kernels"  # one file: the device returns a few
    log "done"
    ;;
backend-ops)  # llama.cpp's test-backend-ops, built alone against this build: OPS (default ARGMAX) against the CPU, then timed
    build
    g++ -O2 -std=c++17 "$SRC/vendor/llama.cpp/tests/test-backend-ops.cpp" -I"$SRC/vendor/llama.cpp/ggml/include" \
        -L"$LCPP/bin" -lggml -lggml-base -Wl,-rpath,"$LCPP/bin" -lpthread -o "$LCPP/bin/test-backend-ops" \
        || { echo "test-backend-ops did not build (is tests/test-backend-ops.cpp in .carry's sdist?)" >&2; exit 1; }
    for op in ${OPS:-ARGMAX}; do
        "$LCPP/bin/test-backend-ops" test -o "$op" 2>&1 | tail -25 | tee -a "$OUT/backend-ops.txt"
        "$LCPP/bin/test-backend-ops" perf -o "$op" 2>&1 | grep -v "^ggml_\|^load_backend" | tail -25 | tee -a "$OUT/backend-ops.txt"
    done
    log "done"
    ;;
serve-shaped)  # serve vs llama-server (draft-mtp and plain) at 1 and 4 clients on the oneshot's ~70% head model
    deps
    PYTHONPATH="$SITE" LLAMA_CPP_LIB_PATH=/nonexistent python3 -m bench.models --workdir "$WORK" \
        --widths "${WIDTHS:-9b}" --layers "${LAYERS:-32}" --vocab "${VOCAB:-248320}" --noise "${NOISE:-0.06}" \
        --quant "" --stage python --threads "$(nproc)" --manifest "$WORK/models.txt" > "$OUT/models.log" 2>&1 &
    MODELS=$!
    build llama-server
    wait "$MODELS" || { tail -20 "$OUT/models.log"; exit 1; }
    M="$(grep -m1 'noisy head' "$WORK/models.txt" | cut -d= -f2-)"
    left=$(( ${BUDGET:-540} - (SECONDS - T0) ))
    log "serve benchmark on $M, $left s left"
    py -m bench.serve --model "$M" --llama-server "$LCPP/bin/llama-server" --ngl $NGL --threads 4 -n 128 \
        --clients "${CLIENTS:-1,4}" --seconds "${SERVE_SECONDS:-15}" --draft "${SERVE_DRAFT:-2}" -c 8192 \
        --workdir "$WORK" --out "$OUT/serve-shaped.json" --plot "$OUT/serve-shaped.png" 2>&1 | tee "$OUT/serve-shaped.txt"
    log "done"
    ;;
*) echo "usage: bash bench/gpu.sh all|build|test|bench|lcpp-server|serve|serve-shaped|kernels|timeline|backend-ops|qwen3next|multi|oneshot|shapes [ARGS]" >&2; exit 2 ;;
esac
