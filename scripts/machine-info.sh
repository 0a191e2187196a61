#!/usr/bin/env bash
# What machine a run is on, so a failure can be traced to one: the CPU model, its cores and memory, and (once
# .venv exists) the instruction sets the llama.cpp build chose and the CPU's weight buffers (AMX kept off or not).
#   bash scripts/machine-info.sh [VENV]
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
echo "machine: $(uname -m), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|amx|f16c|fma|sse4)' | sort -u | tr '\n' ' ')"
if [ -x "$VENV/bin/python" ]; then
    "$VENV/bin/python" - <<'PY' || echo "llama.cpp: (not loadable)"
from gguf_mtp.runtime import llama as L
import llama_cpp
print("llama.cpp:", llama_cpp.llama_print_system_info().decode().strip())
print("cpu weight buffers:", ", ".join(L.registry().extra_buffer_types("CPU")) or "none",
      "(all off: AMX)" if L.amx_off() else "")
PY
fi
