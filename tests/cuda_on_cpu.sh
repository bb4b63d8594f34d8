#!/usr/bin/env bash
# The CUDA backends executed on the CPU (docs/gpu.md): cuda/moe_cuda.cu
# translated by hipify-perl and built against HIP-CPU (cuda/hip-cpu/
# translate.sh), then every backend checked against the CPU reference on
# the tiny shapes (test_moe gpu --tiny). Skips (77) without the tools or
# libtbb-dev. VARIANT ubsan: the same under UndefinedBehaviorSanitizer
# (ASan cannot follow HIP-CPU's fiber stacks).
# usage: cuda_on_cpu.sh TEST_MOE SOURCE_DIR BUILD_DIR [ubsan]
set -u
test_moe=$1 src=$2 out=$3/hip-cpu${4:+-$4}
flags=()
[ "${4:-}" = ubsan ] && flags=(-fsanitize=undefined -fno-sanitize-recover=all -g)
"$src/cuda/hip-cpu/translate.sh" "$out" ${flags[@]+"${flags[@]}"} >"$out.log" 2>&1
rc=$?
if [ $rc = 77 ]; then cat "$out.log"; exit 77; fi
if [ $rc != 0 ]; then echo "cuda_on_cpu: the translated module did not build:"; tail -20 "$out.log"; exit 1; fi
ACCEPTMOE_CUDA_MODULE=$out/libamoe_moe_hip_cpu.so UBSAN_OPTIONS=print_stacktrace=1 "$test_moe" gpu --tiny
