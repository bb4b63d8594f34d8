#!/usr/bin/env bash
# The main job: install what it needs that is missing (a compiler, CMake, libyaml,
# jansson), build, run the default spec.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh main
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
build/acceptmoe run workloads/specs/quickstart.yaml "$@"
