#!/usr/bin/env bash
# Installs the Debian packages acceptmoe needs, if any is missing.
set -euo pipefail
pkgs=(cmake make gcc g++ clang time parallel slurm-wlm munge python3-torch pkg-config libyaml-dev libjansson-dev libbenchmark-dev
  gnuplot-nox)
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
