#!/usr/bin/env bash
# GPU verification on a machine without network (the device tool): build llama-cpp-python with CUDA from a
# trimmed copy of its sdist, then run the runtime tests and the run benchmark on the GPU.
#   bash bench/gpu.sh build    # ~5-9 min on 16 cores
#   bash bench/gpu.sh test     # tests/test_runtime.py with every layer on the GPU
#   bash bench/gpu.sh bench [SIZE_GB] [HEAD_NOISE]
#   bash bench/gpu.sh lcpp-server                   # llama-server with CUDA from the same sdist
#   bash bench/gpu.sh serve [SIZE_GB] [HEAD_NOISE]   # bench/serve.py, against llama-server if built
#   bash bench/gpu.sh qwen3next [SIZE_GB]   # bench/qwen3next.py: rollback strategies on a Qwen3-Next-shaped model
#   bash bench/gpu.sh multi [dense,moe,big]   # 2 GPUs: placements with and without MTP (bench/multi_gpu.py)
# Needs .carry/llama_cpp_python-0.3.36-trim.tar.gz and .carry/whl/{gguf,diskcache}-*.whl (see README).
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/gguf-mtp-out}"
mkdir -p "$OUT"
SITE=/tmp/site
py() { PYTHONPATH="$SITE" python3 "$@"; }
case "${1:-}" in
build)
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .carry/whl/*.whl
    rm -rf /tmp/b && mkdir -p /tmp/b && tar xzf .carry/llama_cpp_python-0.3.36-trim.tar.gz -C /tmp/b
    ( cd /tmp/b/llama_cpp_python-0.3.36 &&
      CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=off" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/wheel . ) 2>&1 | tail -20
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" /tmp/wheel/llama_cpp_python-*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" .
    py -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'GPU offload:', llama_cpp.llama_supports_gpu_offload())"
    ;;
test)
    # llama.cpp's libraries must load before any pytest plugin imports numpy (see gguf_mtp/__init__.py)
    cd "$(mktemp -d)" && mkdir examples && cp -r "$OLDPWD/tests" . && cp -r "$OLDPWD/examples/tiny-qwen35-mtp" examples/ &&
    GGUF_MTP_TEST_NGL=99 py -c "import llama_cpp.llama_cpp, sys, pytest; sys.exit(pytest.main(['-q', '-s', '-p', 'no:cacheprovider', 'tests/test_runtime.py', 'tests/test_rollback.py', 'tests/test_tiny_model.py']))" > "$OUT/gpu-tests.log" 2>&1 || true
    grep -E "passed|failed|acceptance|top-1|FAILED" "$OUT/gpu-tests.log" | tail -25
    ;;
bench)
    py bench/run.py --make "${2:-8}" --head-noise "${3:-0.15}" --ngl 99 --threads "$(nproc)" -n 128 --repeats 2 --workdir /tmp/gguf-mtp-bench \
        --out "$OUT/run-gpu.json" 2>&1 | tee "$OUT/run-gpu.txt"
    ;;
lcpp-server)
    # llama-server with CUDA from the same sdist (~5-9 min on 16 cores), for `serve`
    cmake -S /tmp/b/llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/lcpp -DGGML_CUDA=on \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF > "$OUT/lcpp-cfg.log" 2>&1
    cmake --build /tmp/lcpp --target llama-server -j "$(nproc)" > "$OUT/lcpp-build.log" 2>&1
    ls -l /tmp/lcpp/bin/llama-server
    ;;
serve)
    # gguf-mtp serve (MTP on/off) vs llama-server (draft-mtp/plain, if lcpp-server ran) at 1/4/8 clients; needs the
    # serve extra's wheels in .carry/whl too (pip download -d .carry/whl starlette uvicorn typer)
    LS=(); [ -x /tmp/lcpp/bin/llama-server ] && LS=(--llama-server /tmp/lcpp/bin/llama-server)
    py bench/serve.py --make "${2:-8}" --head-noise "${3:-0.15}" --ngl 99 --threads 4 -n 128 \
        --seconds "${SERVE_SECONDS:-20}" --workdir /tmp/gguf-mtp-bench "${LS[@]}" \
        --out "$OUT/serve-gpu.json" 2>&1 | tee "$OUT/serve-gpu.txt"
    ;;
qwen3next)
    # plain vs MTP on a Qwen3-Next-shaped model (vocab 151936), every rollback strategy, perfect and ~70% head
    py bench/qwen3next.py --make "${2:-6}" --ngl 99 --threads "$(nproc)" -n 128 --repeats 2 --workdir /tmp/gguf-mtp-bench \
        --out "$OUT/qwen3next-gpu.json" 2>&1 | tee "$OUT/qwen3next-gpu.txt"
    ;;
multi)  # 2 GPUs: one GPU vs layer split vs head on GPU 1, dense / MoE / a >80 GB MoE (bench/multi_gpu.py)
    py bench/multi_gpu.py --devices CUDA0,CUDA1 --models "${2:-dense,moe,big}" --threads "$(nproc)" \
        --workdir /tmp/gguf-mtp-mgpu --out "$OUT/multi-gpu.json" 2>&1 | tee "$OUT/multi-gpu.txt"
    ;;
*) echo "usage: bash bench/gpu.sh build|test|bench|lcpp-server|serve|qwen3next [SIZE_GB]|multi [MODELS]" >&2; exit 2 ;;
esac
