#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and
# runs each for SECONDS (default 30) from its committed seed corpus
# (tests/fuzz/corpus/<target>/), new inputs going to build-fuzz/corpus/.
# A finding stops with the crashing input under build-fuzz/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 3600 amt
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(spec amt blocks routing commitment targets safetensors placement replay arrivals cells kernels)
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (Debian package clang)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAMOE_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  dict=(); [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="../tests/fuzz/$t.dict")
  echo "== fuzz_$t for ${secs}s"
  (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 "./tests/fuzz/fuzz_$t" -max_total_time="$secs" -max_len=65536 \
     -print_final_stats=1 "${dict[@]}" "corpus/$t" "../tests/fuzz/corpus/$t" 2>&1 | \
     grep -E "^stat::number_of_executed_units|^stat::peak_rss|ERROR|SUMMARY|Done|crash-|leak-|timeout-" || true)
  ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* 2>/dev/null && { echo "fuzz_$t: finding" >&2; exit 1; }
done
echo "fuzz: no findings"
