#!/usr/bin/env bash
# The device compile, checked without a GPU (docs/gpu.md):
#  - sm_90 (the build's target) with -Xptxas -v: registers per kernel, and a
#    failure on any spill or stack frame;
#  - sm_100: the same report, not a failure (a later target, not tuned for);
#  - the PTX: the skinny kernel keeps its 16-byte loads (ld.global.v4), and
#    no kernel uses local memory;
#  - the built module, read back with cuobjdump (PyPI nvidia-cuda-cuobjdump,
#    pinned in scripts/install-deps.sh): every function's LOCAL is 0.
# usage: cuda_resources.sh NVCC SOURCE_DIR MODULE [CUOBJDUMP]   (default: the project's .venv's)
set -u
nvcc=$1 src=$2 module=$3 cuobjdump=${4:-}
[ -n "$cuobjdump" ] || cuobjdump=$(ls "$src"/.venv/lib/python3*/site-packages/nvidia/*/bin/cuobjdump 2>/dev/null | head -1)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
inc=(-I"$src/cuda" -I"$src/sim/core")
fail=0
report() { # ARCH FILE: kernel, registers, stack, spills; returns 1 on a spill or stack
  awk -v arch="$1" '/Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2) }
    /bytes stack frame/ { st[k] = $1; sp[k] = $5 + $9 }
    /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r[k] = $(i + 1) }
    END { bad = 0; for (k in r) { printf "  %s %-60s %4d registers, %3d B stack, %3d B spilled\n", arch, k, r[k], st[k], sp[k];
      if (st[k] > 0 || sp[k] > 0) bad = 1 } exit bad }' "$2"
}
for arch in 90 100; do
  if "$nvcc" -arch=sm_$arch -Xptxas -v -c "$src/cuda/moe_cuda.cu" "${inc[@]}" -o "$T/m$arch.o" >"$T/v$arch.txt" 2>&1; then
    echo "sm_$arch:"
    if ! report "sm_$arch" "$T/v$arch.txt"; then
      if [ $arch = 90 ]; then echo "cuda_resources: a kernel spills or uses a stack frame on sm_90"; fail=1
      else echo "cuda_resources: sm_$arch spills (reported, not a failure)"; fi
    fi
  elif [ $arch = 90 ]; then echo "cuda_resources: sm_90 does not compile:"; tail -5 "$T/v$arch.txt"; fail=1
  else echo "cuda_resources: this nvcc does not compile sm_$arch (reported, not a failure)"; fi
done
"$nvcc" -arch=sm_90 -ptx "$src/cuda/moe_cuda.cu" "${inc[@]}" -o "$T/m.ptx" 2>"$T/ptx.err" || { cat "$T/ptx.err"; exit 1; }
v4=$(awk '/\.entry _Z11skinny_gemm/ { on = 1 } on && /ld\.global(\.nc)?\.v4/ { n++ } on && /^}/ { exit } END { print n + 0 }' "$T/m.ptx")
if [ "$v4" -gt 0 ]; then echo "PTX: skinny_gemm keeps its 16-byte loads ($v4 ld.global.v4)"
else echo "cuda_resources: skinny_gemm lost its 16-byte loads"; fail=1; fi
if grep -q '\.local' "$T/m.ptx"; then echo "cuda_resources: a kernel uses local memory:"; grep -n '\.local' "$T/m.ptx" | head -5; fail=1
else echo "PTX: no kernel uses local memory"; fi
if [ -n "$cuobjdump" ] && [ -x "$cuobjdump" ] && [ -f "$module" ]; then
  "$cuobjdump" --dump-resource-usage "$module" >"$T/ru.txt" 2>&1 || { cat "$T/ru.txt"; exit 1; }
  n=$(grep -c 'Function ' "$T/ru.txt")
  if [ "$n" -gt 0 ] && ! grep -q 'LOCAL:[1-9]' "$T/ru.txt"; then echo "module: $n functions, none with local memory (cuobjdump)"
  else echo "cuda_resources: the built module's resource usage:"; cat "$T/ru.txt"; fail=1; fi
else
  echo "module: cuobjdump absent (scripts/install-deps.sh installs it): not read back"
fi
exit $fail
