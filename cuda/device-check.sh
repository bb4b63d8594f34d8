#!/usr/bin/env bash
# The one GPU check: build with CUDA, check every kernel against the CPU
# reference, benchmark the kernels, calibrate the cost model, and compare
# predicted with measured expert time per block before and after
# calibration. Prints a short table last. Sized for under 8 minutes on one
# H200 (most of it building and filling 58 GB of weights).
#
# Prepare here:  scripts/fetch-device-debs.sh          (once; fills .debs/)
# Run there:     device run, carry [".debs"], command: bash cuda/device-check.sh
# Results go to $OUT (the device tool's folder) or ./device-out.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
log() { echo "== $*"; }
if [ -d .debs ]; then # libraries the GPU image lacks, unpacked beside it
  for f in .debs/*.deb; do dpkg -x "$f" /opt/amoe-deps; done
  export PKG_CONFIG_PATH=/opt/amoe-deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/amoe-deps/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=/opt/amoe-deps # the .pc files say prefix=/usr
  export LD_LIBRARY_PATH=/opt/amoe-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export PATH=/opt/amoe-deps/usr/bin:$PATH
  EXTRA="-DCMAKE_PREFIX_PATH=/opt/amoe-deps/usr"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
log build
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DAMOE_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 ${EXTRA:-} \
  > "$OUT/cmake.log" 2>&1 && cmake --build build-gpu -j16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" "$OUT/cmake.log"; exit 1; }
log "correctness: every backend against the CPU reference (must pass before timing)"
build-gpu/tests/test_moe gpu | tee "$OUT/correctness.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "kernels disagree with the reference: no timings"; exit 1; }
log "kernel benchmarks"
timeout 240 build-gpu/harness/bench/amoe_bench_moe --benchmark_min_time=0.05 \
  --benchmark_out="$OUT/bench_moe.json" --benchmark_out_format=json > "$OUT/bench_moe.txt" 2>&1
tail -50 "$OUT/bench_moe.txt"
log "before calibration"
ACCEPTMOE_CALIBRATION=off timeout 180 build-gpu/acceptmoe run workloads/specs/device-check.yaml --backend skinny \
  --repeats 3 --cold --out "$OUT/before" --quiet > /dev/null
log calibrate-hw
build-gpu/acceptmoe calibrate-hw workloads/specs/device-check.yaml --backend skinny -o "$OUT/h200.yaml"
log "after calibration"
ACCEPTMOE_CALIBRATION="$OUT" timeout 180 build-gpu/acceptmoe run workloads/specs/device-check.yaml --backend skinny \
  --repeats 3 --cold --out "$OUT/after" --quiet > /dev/null
log "offload, 48 slots per layer, LRU (after calibration)"
ACCEPTMOE_CALIBRATION="$OUT" timeout 180 build-gpu/acceptmoe run workloads/specs/device-check.yaml --backend skinny \
  --repeats 3 --set offload.slots_per_layer=48 --out "$OUT/offload" --quiet > /dev/null
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; printf "%-18s %14s %14s %14s\n","policy","pred.fetch ms","meas.fetch ms","H2D GB/s"; next}
  {printf "%-18s %14.3f %14.3f %14.2f\n",$c["policy"],1e3*$c["predicted_fetch_time_per_block_s"],
   1e3*$c["measured_fetch_time_per_block_s"],$c["measured_h2d_bytes_per_s"]/1e9}' "$OUT/offload/summary.csv" | tee "$OUT/offload.txt"
log "predicted vs measured expert time per block (ms), skinny kernel"
paste -d, "$OUT/before/summary.csv" "$OUT/after/summary.csv" | awk -F, '
  NR==1{for(i=1;i<=NF;i++) if(!c[$i]) c[$i]=i; else d[$i]=i; next}
  NR==2{printf "%-18s %12s %12s %12s %8s %8s\n","policy","pred.before","pred.after","measured","ratio.b","ratio.a"}
  {printf "%-18s %12.3f %12.3f %12.3f %8.2f %8.2f\n",$c["policy"],1e3*$c["predicted_moe_time_per_block_s"],
   1e3*$d["predicted_moe_time_per_block_s"],1e3*$d["measured_moe_time_per_block_s"],
   $c["measured_over_predicted"],$d["measured_over_predicted"]}' | tee "$OUT/table.txt"
