#!/usr/bin/env bash
# Builds cuda/moe_cuda.cu for the CPU: hipify-perl translates it to HIP
# (never committed), the rules below fix what the translator misses, and
# HIP-CPU (a header-only HIP runtime that runs kernels as fibers) compiles
# it into the module moe.c loads (ACCEPTMOE_CUDA_MODULE), with the
# project's compat.h and include/hipblas.h for what HIP-CPU lacks.
#   cuda/hip-cpu/translate.sh OUT_DIR [EXTRA_CXXFLAGS...]
# writes OUT_DIR/moe_hip.cpp and OUT_DIR/libamoe_moe_hip_cpu.so (AMOE_HIP_PLANT: a perl
# substitution applied after the rules, for the planted-bug test); exits 77
# (skip) when the tools or libtbb-dev are absent. AMOE_TOOLS: the tools
# folder (default ../shared/tools beside the project).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$1
shift
tools=${AMOE_TOOLS:-$src/../shared/tools}
hipify=$tools/hipify/bin/hipify-perl hipcpu=$tools/hip-cpu
[ -f "$hipify" ] || { echo "translate: no hipify-perl at $hipify (skipped)"; exit 77; }
[ -d "$hipcpu/include/hip" ] || { echo "translate: no HIP-CPU at $hipcpu (skipped)"; exit 77; }
[ -f /usr/include/tbb/tbb.h ] || [ -f /usr/include/oneapi/tbb.h ] ||
  { echo "translate: libtbb-dev is not installed (scripts/install-deps.sh; skipped)"; exit 77; }
mkdir -p "$out"
perl "$hipify" -hip-kernel-execution-syntax -experimental -quiet-warnings "$src/cuda/moe_cuda.cu" >"$out/moe_hip.raw.cpp"
# The rules for what hipify-perl leaves (change these, never the generated file):
#  - a dynamic shared array, `extern __shared__ T name[];`, is HIP's HIP_DYNAMIC_SHARED(T, name)
#  - a <<<grid, block, shared, stream>>> launch whose arguments run over lines is hipLaunchKernelGGL
#  - CUDA's bf16 header, which it keeps, is compat.h's bf16
perl -0pe 's/extern __shared__ (\w+) (\w+)\[\];/HIP_DYNAMIC_SHARED($1, $2)/g;
           s/^#include <cuda_bf16.h>\n//mg;
           s/\b(\w+)<<<(.*?)>>>\(/hipLaunchKernelGGL($1, $2, /gs' "$out/moe_hip.raw.cpp" >"$out/moe_hip.cpp"
# AMOE_HIP_PLANT: one more perl substitution, a bug planted on purpose (tests/cuda_on_cpu.sh
# shows the check fails on it); it must change the file
if [ -n "${AMOE_HIP_PLANT:-}" ]; then
  perl -0pe "$AMOE_HIP_PLANT" "$out/moe_hip.cpp" >"$out/moe_hip.planted.cpp"
  cmp -s "$out/moe_hip.cpp" "$out/moe_hip.planted.cpp" && { echo "translate: the planted change matched nothing" >&2; exit 1; }
  mv "$out/moe_hip.planted.cpp" "$out/moe_hip.cpp"
fi
if grep -n '<<<\|extern __shared__' "$out/moe_hip.cpp"; then
  echo "translate: a launch or shared array the rules do not cover" >&2
  exit 1
fi
cc -std=c11 -O1 -fPIC -c "$src/sim/core/err.c" -I "$src/sim/core" -o "$out/err.o"
g++ -std=c++17 -O2 -fPIC -shared -w -fdisable-ipa-simdclone -include "$src/cuda/hip-cpu/compat.h" -I "$src/cuda/hip-cpu/include" \
  -I "$hipcpu/include" -I "$src/cuda" -I "$src/sim/core" "$@" "$out/moe_hip.cpp" "$out/err.o" \
  -o "$out/libamoe_moe_hip_cpu.so" -ltbb -lpthread
echo "translate: $out/libamoe_moe_hip_cpu.so"
