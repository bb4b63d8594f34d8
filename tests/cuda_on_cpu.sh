#!/usr/bin/env bash
# The CUDA backends executed on the CPU (docs/gpu.md): cuda/moe_cuda.cu
# translated by hipify-perl and built against HIP-CPU (cuda/hip-cpu/
# translate.sh), then every backend checked against the CPU reference on
# the tiny shapes (test_moe gpu --tiny). Skips (77) without the tools or
# libtbb-dev. VARIANT ubsan: the same under UndefinedBehaviorSanitizer
# (ASan cannot follow HIP-CPU's fiber stacks). VARIANT planted: the check
# can fail: each planted bug (a wrong index in combine, an off-by-one in
# bucket, a wrong leading dimension) must make it fail.
# VARIANT old-cublas: built as with cuBLAS 12.4, where grouped GEMMs do not
# exist: every other backend still runs and cublas-grouped refuses at open.
# VARIANT after-oom: device allocations above 256 KiB fail; a batch that
# needs them fails cleanly, and a small one after it matches the reference.
# usage: cuda_on_cpu.sh TEST_MOE SOURCE_DIR BUILD_DIR [ubsan|planted|old-cublas|after-oom]
set -u
test_moe=$1 src=$2 out=$3/hip-cpu${4:+-$4}
flags=()
[ "${4:-}" = ubsan ] && flags=(-fsanitize=undefined -fno-sanitize-recover=all -g)
if [ "${4:-}" = after-oom ]; then # a failed allocation leaves nothing a later run launches on (N4)
  "$src/cuda/hip-cpu/translate.sh" "$out" -O1 >"$out.log" 2>&1
  rc=$?
  if [ $rc = 77 ]; then cat "$out.log"; exit 77; fi
  [ $rc = 0 ] || { tail -5 "$out.log"; exit 1; }
  ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so "$test_moe" gpu-after-oom
  exit $?
fi
if [ "${4:-}" = old-cublas ]; then
  "$src/cuda/hip-cpu/translate.sh" "$out" -O1 -DCUBLAS_VERSION=120400 >"$out.log" 2>&1
  rc=$?
  if [ $rc = 77 ]; then cat "$out.log"; exit 77; fi
  [ $rc = 0 ] || { echo "cuda_on_cpu: the module did not build as with cuBLAS 12.4:"; tail -5 "$out.log"; exit 1; }
  export ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so
  "$test_moe" gpu cublas-loop --tiny >"$out.run" 2>&1 || { echo "cuda_on_cpu: cublas-loop failed without grouped GEMMs"; tail -5 "$out.run"; exit 1; }
  "$test_moe" gpu cublas-grouped --tiny >"$out.run" 2>&1
  if grep -q "cublas-grouped needs cuBLAS 12.5" "$out.run"; then echo "cuda_on_cpu: cublas-grouped refuses as it should"; exit 0; fi
  echo "cuda_on_cpu: cublas-grouped did not refuse without grouped GEMMs:"; tail -5 "$out.run"; exit 1
fi
if [ "${4:-}" = planted ]; then
  # (the backend each runs on: the shared kernels on the quickest one)
  plants=("combine reads the next token's slot|cublas-loop|s/int p = pos_of\[t \* k \+ j\];/int p = pos_of[(t * k + j + 1) % (T * k)];/"
    "bucket places one past each expert's offset|cublas-loop|s/int p = off\[x\] \+ before\[x\];/int p = off[x] + before[x] + 1;/"
    "bucket ignores the chunks before its own|cublas-loop|s/b \+= q < c \? n : 0;/b += 0 * n;/"
    "the grouped GEMM's A has a wrong leading dimension|cublas-grouped|s/lda\[j\] = K;/lda[j] = K + 8;/")
  bad=0
  for pl in "${plants[@]}"; do
    rest=${pl#*|} backend=${rest%%|*}
    AMOE_HIP_PLANT=${rest#*|} "$src/cuda/hip-cpu/translate.sh" "$out" -O1 >"$out.log" 2>&1
    rc=$?
    if [ $rc = 77 ]; then cat "$out.log"; exit 77; fi
    if [ $rc != 0 ]; then echo "cuda_on_cpu: planted '${pl%%|*}' did not build:"; tail -5 "$out.log"; exit 1; fi
    ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so timeout 300 "$test_moe" gpu "$backend" --tiny >"$out.run" 2>&1
    rc=$?
    if [ $rc = 0 ]; then echo "cuda_on_cpu: planted '${pl%%|*}' passed the check"; bad=1
    else echo "cuda_on_cpu: planted '${pl%%|*}' fails it: exit $rc, $(grep -c 'failed:' "$out.run") failed checks"; fi
  done
  exit $bad
fi
"$src/cuda/hip-cpu/translate.sh" "$out" ${flags[@]+"${flags[@]}"} >"$out.log" 2>&1
rc=$?
if [ $rc = 77 ]; then cat "$out.log"; exit 77; fi
if [ $rc != 0 ]; then echo "cuda_on_cpu: the translated module did not build:"; tail -20 "$out.log"; exit 1; fi
ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so UBSAN_OPTIONS=print_stacktrace=1 "$test_moe" gpu --tiny || exit 1
[ -n "${4:-}" ] && exit 0
# calibrate-hw through the emulated module: the file holds the per-token rate
# fitted from the kernel's own points (6·d·f·64 over the marginal time of an
# expert at 64 tokens, 16 experts against 1) and leaves peak_flops alone
ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so "$3/acceptmoe" calibrate-hw "$src/tests/fixtures/tiny.yaml" \
  --backend skinny -o "$out/h200.yaml" >"$out.cal" 2>&1 || { echo "cuda_on_cpu: calibrate-hw failed:"; tail -3 "$out.cal"; exit 1; }
awk '/^moe_flops:/{m=$2} /^moe_flops_tokens: 0$/{z=1} /^peak_flops:/{p=1} /compute_expert_time_s/{c=1}
  c && /^    64: /{gsub(/[\[\],]/," "); x1=$2; xx=$3}
  END{want=6*64*32*64/((xx-x1)/15); r=m/want-1; if(r<0)r=-r
      if(!z||p||!(m>0)||r>1e-4){printf "cuda_on_cpu: calibrate-hw wrote moe_flops %g (want %g), tokens line %d, peak_flops line %d\n",m,want,z,p; exit 1}
      printf "cuda_on_cpu: calibrate-hw fitted moe_flops %g from the kernel itself\n",m}' "$out/h200.yaml"
