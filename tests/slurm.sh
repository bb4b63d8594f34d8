#!/usr/bin/env bash
# scripts/sweep-slurm.sh against a real single-node Slurm: starts munged (if
# it is not running), slurmctld and slurmd on this host with a private
# configuration, runs a 6-point sweep in 3 shards as an array job plus the
# dependent merge job, compares the merged files with an unsharded run
# byte for byte, and stops what it started. Exits 77 (skipped) with the
# reason when Slurm is not installed or its daemons cannot start here.
# usage: slurm.sh ACCEPTMOE SOURCE_DIR
set -u
A=$1; SRC=$2
cd "$SRC" || exit 1
skip() { echo "skipped: $*"; exit 77; }
for b in slurmctld slurmd sbatch squeue munged; do command -v $b >/dev/null || skip "no $b (Debian packages slurm-wlm, munge)"; done
T=$(mktemp -d /tmp/amoe-slurm-XXXXXX)
started_munge=0
cleanup() {
  for p in "$T/slurmctld.pid" "$T/slurmd.pid"; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  [ $started_munge = 1 ] && pkill -x munged 2>/dev/null
  sleep 1; rm -rf "$T"
}
trap cleanup EXIT
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null
  (su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force 2>/dev/null) || skip "munged does not start here"
  started_munge=1
fi
H=$(hostname); base=$((20000 + $$ % 20000))
mkdir -p "$T/state" "$T/spool"
cat >"$T/slurm.conf" <<CONF
ClusterName=amoetest
SlurmctldHost=$H
SlurmUser=$(id -un)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/ctld.log
SlurmdLogFile=$T/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
NodeName=$H CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$T/slurm.conf
slurmctld -f "$SLURM_CONF" 2>/dev/null || skip "slurmctld does not start here"
slurmd -f "$SLURM_CONF" 2>/dev/null || skip "slurmd does not start here"
for _ in $(seq 1 30); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo -h -o %t 2>/dev/null | grep -q idle || skip "the node did not come up: $(tail -3 "$T/ctld.log" 2>/dev/null)"
S=tests/fixtures/sweep6.yaml
"$A" run $S --out "$T/ref" --quiet >/dev/null 2>&1 || { echo "unsharded run failed"; echo "0 passed, 1 failed"; exit 1; }
ACCEPTMOE="$A" scripts/sweep-slurm.sh $S 3 "$T/out" >/dev/null || { echo "sbatch failed"; echo "0 passed, 1 failed"; exit 1; }
for _ in $(seq 1 120); do [ -f "$T/out/meta.json" ] && [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
pass=0; fail=0
for f in summary.csv layers.csv meta.json spec.resolved.yaml; do
  if cmp -s "$T/ref/$f" "$T/out/$f"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $f differs after the Slurm sweep"; fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
