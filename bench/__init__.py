"""The benchmarks, run from the repository root as modules: ``python -m bench.<script>`` (``bench/gpu.sh`` and
``bench/gpu_vulkan.sh`` do). Importing this package imports nothing else (a script that runs models must load
llama.cpp before numpy: tests/test_bench_imports.py)."""
