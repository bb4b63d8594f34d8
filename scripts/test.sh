#!/usr/bin/env bash
# Builds and runs every test (GPU tests skip without a GPU), then the suite
# again in a build with AddressSanitizer and UndefinedBehaviorSanitizer (any
# finding fails it). That build has the CUDA rows without nvcc and runs the
# kernels emulated on the CPU (cuda_on_cpu, and its old-cublas and after-oom
# variants); tests/lsan.supp names HIP-CPU's one leak.
# The second pass leaves out the tests labelled slow: fit's recovery of
# known routing (cli_fit, cli_fit_drift), whose rounds are the same code the
# core CLI test runs through fit under the sanitizers, the engine presets'
# check (a Python driver of the same binary) and the planted-bug variant of
# cuda_on_cpu (repeated work, not coverage).
# ACCEPTMOE_NO_SANITIZE=1 skips the second pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
(cd build && ctest --output-on-failure -j"$(nproc)")
if [ "${ACCEPTMOE_NO_SANITIZE:-0}" != 1 ]; then
  echo "== the same suite under -fsanitize=address,undefined"
  cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAMOE_SANITIZE=ON >/dev/null
  cmake --build build-san -j"$(nproc)"
  (cd build-san && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$(nproc)" -LE slow)
fi
