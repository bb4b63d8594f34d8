#!/usr/bin/env bash
# The one GPU check, sized for a 15-minute device lease: at most 6 minutes
# (a hard overall timeout), so that a rerun fits.
#   0. preflight (seconds): nvidia-smi, nvcc, cmake >= 3.25, ninja or make,
#      cuBLAS headers and libraries; stops with a clear message
#   1. build with CUDA
#   2. correctness, backend by backend, against the CPU reference (layer 1
#      of two, one-tile and multi-tile shapes); a failing backend is left
#      out of what follows, the others carry on
#   3. compute-sanitizer memcheck, racecheck, synccheck and initcheck on tiny
#      shapes (if present): what the CPU run of the kernels (ctest -R
#      cuda_on_cpu, docs/gpu.md) cannot show
#   4. kernel benchmarks of the backends that passed
#   5. simulator vs measured expert time per block, before and after
#      calibrate-hw, each kernel calibrated on itself (skinny, then
#      cublas-grouped, the engines' kind of kernel)
#   6. offload: H2D fetches against the prediction (few blocks)
#   7. the host side of a step (cuda/step-probe.py, PyTorch): eager launch,
#      graph replay, a routing read-back; leads for an engine's launch_s
# What comes back ($OUT; the device tool returns at most 8 files): table.txt
# (every step's result, the tables), h200.yaml (the calibration) and
# device-check.tar.gz (logs, CSVs, benchmark JSON).
#
# Prepare here:  scripts/fetch-device-debs.sh          (once; fills .debs/)
# Run there:     device run, carry [".debs"], timeout_s 420, command: bash cuda/device-check.sh
set -uo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.." || exit 1
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
W=$(mktemp -d) # everything but the table and the calibration, packed at the end
TABLE=$OUT/table.txt
BUDGET=${AMOE_DEVICE_BUDGET_S:-360}
if [ -z "${AMOE_DEVICE_INNER:-}" ]; then # the hard overall timeout, around this same script
  AMOE_DEVICE_INNER=1 OUT=$OUT timeout --signal=TERM --kill-after=15 "$BUDGET" bash "$SELF" "$@"
  rc=$?
  [ $rc -eq 124 ] && echo "!! device-check: stopped at the ${BUDGET} s budget" | tee -a "$TABLE"
  exit $rc
fi
say() { echo "$*" | tee -a "$TABLE"; }
log() { echo "== $*" | tee -a "$TABLE"; }
pack() {
  [ -f "$W/h200.yaml" ] && cp "$W/h200.yaml" "$OUT/h200.yaml"
  [ -f "$W/cal-cublas-grouped/h200.yaml" ] && cp "$W/cal-cublas-grouped/h200.yaml" "$OUT/h200-cublas-grouped.yaml"
  tar -C "$W" -czf "$OUT/device-check.tar.gz" . 2>/dev/null
  rm -rf "$W"
}
PID=
trap pack EXIT
trap 'say "!! interrupted"; [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null; exit 124' TERM INT
: >"$TABLE"
t0=$SECONDS
step() { # step SECONDS NAME command...: one step under its own timeout
  local lim=$1 name=$2
  shift 2
  local s=$SECONDS rc
  # in the background, so that the overall timeout's TERM is handled at once
  timeout --kill-after=5 "$lim" "$@" >"$W/$name.log" 2>&1 &
  PID=$!
  wait "$PID"
  rc=$?
  PID=
  say "   ($name: exit $rc, $((SECONDS - s)) s)"
  return $rc
}

log "preflight"
fail() { say "!! preflight: $*"; exit 3; }
if [ -d .debs ]; then # libraries the GPU image lacks, unpacked beside it
  for f in .debs/*.deb; do dpkg -x "$f" /opt/amoe-deps; done
  export PKG_CONFIG_PATH=/opt/amoe-deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/amoe-deps/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=/opt/amoe-deps # the .pc files say prefix=/usr
  export LD_LIBRARY_PATH=/opt/amoe-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  export PATH=/opt/amoe-deps/usr/bin:$PATH
  EXTRA="-DCMAKE_PREFIX_PATH=/opt/amoe-deps/usr"
fi
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: is this a GPU machine?"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$W/gpu.txt" 2>&1 ||
  fail "nvidia-smi: $(cat "$W/gpu.txt")"
say "   GPU: $(cat "$W/gpu.txt")"
any() { local f; for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || fail "no nvcc on PATH or in /usr/local/cuda/bin"
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
any "$CUDA_HOME"/include/cublas_v2.h "$CUDA_HOME"/targets/*/include/cublas_v2.h || CUDA_HOME=/usr/local/cuda
say "   nvcc: $("$NVCC" --version | tail -1) ($NVCC)"
command -v cmake >/dev/null || fail "no cmake"
cv=$(cmake --version | head -1 | grep -oE '[0-9]+\.[0-9]+')
[ "$(printf '%s\n3.25\n' "$cv" | sort -V | head -1)" = 3.25 ] || fail "cmake $cv; 3.25 or newer needed"
if command -v ninja >/dev/null; then GEN=(-G Ninja); elif command -v make >/dev/null; then GEN=(-G "Unix Makefiles"); else
  fail "neither ninja nor make"
fi
any "$CUDA_HOME"/include/cublas_v2.h "$CUDA_HOME"/targets/*/include/cublas_v2.h || fail "no cublas_v2.h under $CUDA_HOME"
any "$CUDA_HOME"/lib64/libcublas.so "$CUDA_HOME"/lib/libcublas.so "$CUDA_HOME"/targets/*/lib/libcublas.so ||
  fail "no libcublas.so under $CUDA_HOME"
for p in yaml-0.1 jansson; do pkg-config --exists $p || fail "no $p (carry .debs: scripts/fetch-device-debs.sh)"; done
SAN=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer 2>/dev/null || true)

log "build ($((SECONDS - t0)) s)"
step 150 cmake cmake -S . -B build-gpu "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DAMOE_WERROR=OFF \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 ${EXTRA:-} || { tail -20 "$W/cmake.log" | tee -a "$TABLE"; exit 1; }
grep -q "CUDA harness ON" "$W/cmake.log" || { say "!! CMake configured without CUDA"; exit 1; }
step 150 build cmake --build build-gpu -j16 || { tail -30 "$W/build.log" | tee -a "$TABLE"; exit 1; }

log "correctness against the CPU reference, backend by backend ($((SECONDS - t0)) s)"
OK=()
for b in skinny cublas-loop cublas-grouped; do
  if step 40 "correct-$b" build-gpu/tests/test_moe gpu "$b"; then OK+=("$b"); else
    say "!! $b disagrees with the reference or failed: left out"; tail -5 "$W/correct-$b.log" | tee -a "$TABLE"
  fi
  grep -E "rel L2" "$W/correct-$b.log" | sed 's/^/   /' | tee -a "$TABLE" >/dev/null
done
[ ${#OK[@]} -gt 0 ] || { say "!! no backend agrees with the reference: no timings"; exit 1; }
say "   passed: ${OK[*]}"
has() { local x; for x in "${OK[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
RUNB=${OK[0]}

if [ -n "$SAN" ]; then
  log "compute-sanitizer on tiny shapes ($((SECONDS - t0)) s)"
  for b in "${OK[@]}"; do
    step 60 "memcheck-$b" "$SAN" --tool memcheck --error-exitcode 9 build-gpu/tests/test_moe gpu "$b" --tiny ||
      say "!! memcheck $b: $(grep -m3 -E 'ERROR|Invalid' "$W/memcheck-$b.log" | tr '\n' ' ')"
  done
  has skinny && { step 60 racecheck-skinny "$SAN" --tool racecheck --error-exitcode 9 build-gpu/tests/test_moe gpu \
    skinny --tiny || say "!! racecheck skinny: $(grep -m3 -E 'ERROR|hazard' "$W/racecheck-skinny.log" | tr '\n' ' ')"; }
  # barriers every thread must reach (the skinny kernel's shuffles, bucket's
  # scan) and reads of memory nothing wrote: what fibers on the CPU cannot show
  for tool in synccheck initcheck; do
    step 60 "$tool-$RUNB" "$SAN" --tool $tool --error-exitcode 9 build-gpu/tests/test_moe gpu "$RUNB" --tiny ||
      say "!! $tool $RUNB: $(grep -m3 -E 'ERROR|Uninitialized|barrier' "$W/$tool-$RUNB.log" | tr '\n' ' ')"
  done
  has cublas-grouped && [ "$RUNB" != cublas-grouped ] && { step 60 initcheck-cublas-grouped "$SAN" --tool initcheck \
    --error-exitcode 9 build-gpu/tests/test_moe gpu cublas-grouped --tiny ||
    say "!! initcheck cublas-grouped: $(grep -m3 -E 'ERROR|Uninitialized' "$W/initcheck-cublas-grouped.log" | tr '\n' ' ')"; }
  has skinny && [ "$RUNB" != skinny ] && { step 60 synccheck-skinny "$SAN" --tool synccheck --error-exitcode 9 \
    build-gpu/tests/test_moe gpu skinny --tiny || say "!! synccheck skinny: $(grep -m3 ERROR "$W/synccheck-skinny.log" | tr '\n' ' ')"; }
else
  say "   (no compute-sanitizer: memcheck, racecheck, synccheck and initcheck skipped)"
fi

log "kernel benchmarks ($((SECONDS - t0)) s)"
filter=$(IFS='|'; echo "${OK[*]}")
step 90 bench build-gpu/harness/bench/amoe_bench_moe --benchmark_min_time=0.05 --benchmark_filter="$filter" \
  --benchmark_out="$W/bench_moe.json" --benchmark_out_format=json
grep -E "^moe_layer/" "$W/bench.log" | awk '{printf "   %s\n", $0}' | head -40 | tee -a "$TABLE" >/dev/null

# Each kernel is calibrated on itself (streaming and per-token rate), then
# its blocks are measured beside the prediction before and after: a
# calibration from one kernel says nothing of another's blocks.
run() { # run NAME CALIBRATION BACKEND [--set ...]
  local name=$1 cal=$2 be=$3
  shift 3
  step 60 "$name" env ACCEPTMOE_CALIBRATION="$cal" build-gpu/acceptmoe run workloads/specs/device-check.yaml \
    --backend "$be" --repeats 3 --cold --out "$W/$name" --quiet "$@"
}
KERNELS=("$RUNB")
has cublas-grouped && [ "$RUNB" != cublas-grouped ] && KERNELS+=(cublas-grouped)
for b in "${KERNELS[@]}"; do
  d=$W # the first kernel's calibration is the one handed back as h200.yaml
  [ "$b" != "$RUNB" ] && d=$W/cal-$b && mkdir -p "$d"
  log "simulator vs measured, $b ($((SECONDS - t0)) s)"
  run "before-$b" off "$b" --set workload.blocks=12
  step 60 "calibrate-$b" build-gpu/acceptmoe calibrate-hw workloads/specs/device-check.yaml --backend "$b" \
    -o "$d/h200.yaml" && say "   $(tail -1 "$W/calibrate-$b.log")"
  [ -f "$d/h200.yaml" ] && run "after-$b" "$d" "$b" --set workload.blocks=12
  if [ -f "$W/before-$b/summary.csv" ] && [ -f "$W/after-$b/summary.csv" ]; then
    paste -d, "$W/before-$b/summary.csv" "$W/after-$b/summary.csv" | awk -F, '
      NR==1{for(i=1;i<=NF;i++) if(!c[$i]) c[$i]=i; else d[$i]=i; next}
      NR==2{printf "   %-18s %12s %12s %12s %8s %8s\n","policy","pred.before","pred.after","measured","ratio.b","ratio.a"}
      {printf "   %-18s %12.3f %12.3f %12.3f %8.2f %8.2f\n",$c["policy"],1e3*$c["predicted_moe_time_per_block_s"],
       1e3*$d["predicted_moe_time_per_block_s"],1e3*$d["measured_moe_time_per_block_s"],
       $c["measured_over_predicted"],$d["measured_over_predicted"]}' | tee -a "$TABLE"
  fi
done

log "offload, 48 slots per layer, LRU ($((SECONDS - t0)) s)"
run offload "${W}" "$RUNB" --set offload.slots_per_layer=48 --set workload.blocks=4 --set 'policies=[natural, acceptmoe]'
if [ -f "$W/offload/summary.csv" ]; then
  awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i; printf "   %-18s %14s %14s %14s\n","policy","pred.fetch ms","meas.fetch ms","H2D GB/s"; next}
    {printf "   %-18s %14.3f %14.3f %14.2f\n",$c["policy"],1e3*$c["predicted_fetch_time_per_block_s"],
     1e3*$c["measured_fetch_time_per_block_s"],$c["measured_h2d_bytes_per_s"]/1e9}' "$W/offload/summary.csv" |
    tee -a "$TABLE"
fi
log "host side of a step, PyTorch ($((SECONDS - t0)) s)"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  step 40 probe python3 cuda/step-probe.py "$W/step-probe.csv" && grep -E '^   ' "$W/probe.log" | tee -a "$TABLE" >/dev/null
else
  say "   (no PyTorch with CUDA: launch and read-back not probed)"
fi
log "done in $((SECONDS - t0)) s"
