#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the x86-64 .debs the
# GPU machine lacks, into .debs/ (ignored by git). Carry `.debs` with the
# device run; cuda/device-check.sh unpacks them.
set -euo pipefail
cd "$(dirname "$0")/.."
ex=$(git rev-parse --git-path info/exclude) # (a worktree's .git is a file)
mkdir -p "$(dirname "$ex")"
grep -qx '/.debs/' "$ex" 2>/dev/null || echo '/.debs/' >>"$ex"
mkdir -p .debs /tmp/amd64-lists/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64-lists'
apt-get $o update -qq
cd .debs && apt-get $o download libyaml-0-2 libyaml-dev libjansson4 libjansson-dev libbenchmark1debian \
  libbenchmark-dev pkg-config libpkgconf3 pkgconf pkgconf-bin
