#!/usr/bin/env bash
# Installs the Debian packages acceptmoe needs, if any is missing.
#   scripts/install-deps.sh main   the main job (scripts/quickstart.sh): a compiler,
#                                  CMake, libyaml and jansson; nothing else
#   scripts/install-deps.sh        everything the tests, benchmarks and figures use
#                                  (scripts/test.sh, scripts/reproduce.sh) as well
set -euo pipefail
pkgs=(cmake make gcc g++ pkg-config libyaml-dev libjansson-dev)
if [ "${1:-}" != main ]; then
  # the tests (slurm and munge: the sweep's Slurm test; torch and the rest: the hf capture
  # converter's), the benchmarks (Google Benchmark), the figures (gnuplot), HIP-CPU's TBB
  pkgs+=(clang time parallel slurm-wlm munge python3-torch libbenchmark-dev gnuplot-nox libtbb-dev python3-venv
    python3-regex python3-tqdm python3-filelock python3-yaml python3-requests python3-packaging python3-fsspec
    python3-typing-extensions python3-numpy)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

[ "${1:-}" = main ] && exit 0

# Hugging Face transformers, which Debian lacks, for the hf capture converter and
# its test (tests/hf_capture.py): pinned, into .venv beside Debian's torch (1.13;
# transformers 4.44.2 is a release that runs on it and has Mixtral and Qwen2-MoE;
# the venv is Debian's own python3's, whose packages these are).
# Their other dependencies are the Debian packages above. Without network the test
# skips; nothing else needs it.
PYPI=(transformers==4.44.2 tokenizers==0.19.1 safetensors==0.4.5 huggingface-hub==0.24.6)
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import transformers, tokenizers, safetensors, huggingface_hub" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages .venv &&
    .venv/bin/pip install -q --no-deps "${PYPI[@]}" ||
    echo "install-deps: could not install ${PYPI[*]} into .venv (the hf capture test will skip)" >&2
fi

# NVIDIA AIConfigurator's measured kernel tables (docs/design.md §20; scripts/aic-import.py turns
# them into the CSV tables acceptmoe reads) and pyarrow, to read its parquet: pinned, without their
# other dependencies (numpy is Debian's, above; the import needs nothing else of the package).
AIC=(aiconfigurator-core==0.12.0 pyarrow==17.0.0)
if ! .venv/bin/python -c "import aiconfigurator_core, pyarrow" 2>/dev/null ||
  [ "$(.venv/bin/python -c 'from importlib import metadata; print(metadata.version("aiconfigurator-core"))' 2>/dev/null)" != 0.12.0 ]; then
  [ -x .venv/bin/pip ] || /usr/bin/python3 -m venv --system-site-packages .venv
  .venv/bin/pip install -q --no-deps "${AIC[@]}" ||
    echo "install-deps: could not install ${AIC[*]} into .venv (the kernel tables cannot be imported)" >&2
fi

# cuobjdump, which the CUDA toolkit here lacks, to read the built module's
# resource usage back (tests/cuda_resources.sh): NVIDIA's PyPI wheel, pinned.
CUOBJDUMP=nvidia-cuda-cuobjdump==13.2.86
if ! ls .venv/lib/python3*/site-packages/nvidia/*/bin/cuobjdump >/dev/null 2>&1; then
  [ -x .venv/bin/pip ] || /usr/bin/python3 -m venv --system-site-packages .venv
  .venv/bin/pip install -q --no-deps "$CUOBJDUMP" ||
    echo "install-deps: could not install $CUOBJDUMP (cuda_resources will not read the module back)" >&2
fi
