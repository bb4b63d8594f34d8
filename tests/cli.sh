#!/usr/bin/env bash
# End-to-end tests of the acceptmoe command: golden summary, determinism,
# atomic results, and a clear error for every kind of bad input.
# usage: cli.sh ACCEPTMOE SOURCE_DIR SHARED_REAL_DATA [PART]
set -u
A=$1; SRC=$2; REAL=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$SRC" || exit 1
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*" >&2; }
expect() { # expect CODE REGEX -- command...
  local code=$1 re=$2; shift 3
  local out; out=$("$@" 2>&1); local rc=$?
  if [ "$rc" -ne "$code" ]; then bad "exit $rc (want $code): $* :: $out"; return; fi
  if ! grep -qE -- "$re" <<<"$out"; then bad "no /$re/ in output of $*: $out"; return; fi
  ok
}

# PART (the fourth argument; default all) runs one group: core, matrix (the
# policy x source matrix), fit (recovering known routing), fit-drift (a
# drifting bias: the slowest), fit-tree (a tree's concentration, and fit's
# errors): each its own ctest, so they run side by side
PART=${4:-all}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

if want core; then
# golden: the pinned summary, within a relative tolerance of 1e-9
"$A" run tests/fixtures/golden.yaml --out "$T/g1" --quiet >/dev/null 2>"$T/err" || bad "golden run: $(cat "$T/err")"
if awk -F, 'NR==FNR{for(i=1;i<=NF;i++)a[FNR,i]=$i;n[FNR]=NF;next}
  {if(NF!=n[FNR])exit 1;for(i=1;i<=NF;i++){x=a[FNR,i];y=$i;
   if(x==y)continue; if(x+0!=x||y+0!=y)exit 1; d=x-y; if(d<0)d=-d; s=(x<0?-x:x);
   if(d>1e-9*(s>1e-12?s:1e-12))exit 1}} END{if(FNR!=length(n))exit 1}' \
   tests/fixtures/golden_summary.csv "$T/g1/summary.csv"; then ok; else bad "golden summary differs"; fi
# every row covers the same token stream: autoregressive decoding commits
# what natural verification commits, at every point, in one pass per token
if awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
  {k=$c["point"]; if($c["policy"]=="natural")n[k]=$c["committed_tokens"];
   if($c["draft_policy"]=="autoregressive"){a[k]=$c["committed_tokens"];p[k]=$c["forward_passes"]}}
  END{m=0; for(k in a){m++; if(a[k]!=n[k]||p[k]!=a[k]||a[k]<=0)exit 1} exit m==0}' "$T/g1/summary.csv"; then ok
else bad "autoregressive and natural rows commit different token counts"; fi
# determinism: byte-identical CSVs
"$A" run tests/fixtures/golden.yaml --out "$T/g2" --quiet >/dev/null 2>&1
for f in summary.csv layers.csv; do cmp -s "$T/g1/$f" "$T/g2/$f" && ok || bad "$f differs between two runs"; done
# the generator's thread count changes nothing
"$A" run tests/fixtures/golden.yaml --threads 1 --out "$T/t1" --quiet >/dev/null 2>&1
"$A" run tests/fixtures/golden.yaml --threads 3 --out "$T/t3" --quiet >/dev/null 2>&1
cmp -s "$T/t1/summary.csv" "$T/t3/summary.csv" && cmp -s "$T/t1/summary.csv" "$T/g1/summary.csv" && ok \
  || bad "results depend on --threads"
for f in meta.json spec.resolved.yaml; do [ -s "$T/g1/$f" ] && ok || bad "missing $f"; done
# the hand-written AVX2 paths give the portable code's bytes
# (ACCEPTMOE_NO_AVX2=1 turns them off; a no-op on a CPU without them): a
# qwen3 trace (128 experts: the fused noise, the network selection) and its
# replay by every verifier
for v in 0 1; do
  ACCEPTMOE_NO_AVX2=$v "$A" gen workloads/specs/quickstart.yaml --set workload.blocks=6 -o "$T/p$v.amt" >/dev/null 2>&1
  ACCEPTMOE_NO_AVX2=$v "$A" run workloads/specs/quickstart.yaml --set workload.source=trace \
    --set workload.path="$T/p0.amt" --set workload.blocks=0 \
    --set 'policies=[natural, acceptmoe, oracle, {verifier: moe-spec, budget: 32}, {verifier: acceptmoe-fix, budget: 24}]' \
    --out "$T/p$v" --quiet >/dev/null 2>&1
done
[ -s "$T/p0.amt" ] && cmp -s "$T/p0.amt" "$T/p1.amt" && ok || bad "the generator's vector and portable paths differ"
[ -s "$T/p0/summary.csv" ] && cmp -s "$T/p0/summary.csv" "$T/p1/summary.csv" && cmp -s "$T/p0/layers.csv" "$T/p1/layers.csv" &&
  ok || bad "the replay's vector and portable paths differ"
# and the noise loop's tails: Mixtral (8 experts: half a step), 60 experts
# (a half and a masked quarter), 5 (masked only)
for c in "mixtral-fit.yaml" "quickstart.yaml --set model.experts=60" "quickstart.yaml --set model.experts=5 --set model.top_k=2"; do
  for v in 0 1; do
    # shellcheck disable=SC2086 # (the case's words)
    ACCEPTMOE_NO_AVX2=$v "$A" gen workloads/specs/$c --set 'policies=[natural]' --set workload.blocks=6 -o "$T/x$v.amt" >/dev/null 2>&1
  done
  [ -s "$T/x0.amt" ] && cmp -s "$T/x0.amt" "$T/x1.amt" && ok || bad "the generator's vector and portable paths differ: $c"
  rm -f "$T/x0.amt" "$T/x1.amt"
done

# the resolved spec runs again to the same summary
"$A" run "$T/g1/spec.resolved.yaml" --out "$T/g3" --quiet >/dev/null 2>"$T/err" || bad "resolved spec: $(cat "$T/err")"
cmp -s "$T/g1/summary.csv" "$T/g3/summary.csv" && ok || bad "resolved spec gives another summary"
# --set, selection dump, blocks.csv
expect 0 "moe-spec/B=12" -- "$A" run tests/fixtures/golden.yaml --out "$T/s" --set "policies=[{verifier: moe-spec, budget: 12}]" \
  --set workload.blocks=5 --blocks-csv --dump-selection "$T/s/sel.jsonl"
[ "$(wc -l < "$T/s/blocks.csv")" -eq $((1 + 5*2*2)) ] && ok || bad "blocks.csv rows"
grep -q '"policy":"moe-spec/B=12","union":\[' "$T/s/sel.jsonl" && ok || bad "selection dump"

# commitment: calibrate to a file, then run from it (meta.json says so)
"$A" calibrate tests/fixtures/golden.yaml -o "$T/phat.yaml" --set offload.policy=lru
grep -q "^table: \[1\.000000, 0\." "$T/phat.yaml" && ok || bad "calibrate wrote no table"
"$A" run tests/fixtures/golden.yaml --set offload.policy=lru --set commitment.file="$T/phat.yaml" --set workload.blocks=5 \
  --out "$T/cf" --quiet > /dev/null 2>&1 && grep -q "\"commitment\": \"file $T/phat.yaml\"" "$T/cf/meta.json" && ok \
  || bad "a commitment file is not used"
"$A" run tests/fixtures/golden.yaml --set offload.policy=lru --set "commitment.table=[1, 0.5, 0.2]" --set workload.blocks=5 \
  --out "$T/ct" --quiet > /dev/null 2>&1 && grep -q '"commitment": "table in the spec"' "$T/ct/meta.json" && ok \
  || bad "an inline commitment table is not used"

# bad specs: file:line:column, all of them, exit 2
printf 'name: x\nmodel: qwen3-30b-a3b\nhardware: h200\nworkload: {blocks: many, seed: -1}\nbogus: 1\n' > "$T/b1.yaml"
expect 2 "b1.yaml:4:20: workload.blocks must be an integer" -- "$A" run "$T/b1.yaml" --out "$T/o"
expect 2 "b1.yaml:5:1: unknown key 'bogus'" -- "$A" run "$T/b1.yaml" --out "$T/o"
expect 2 "workload.seed must be an integer" -- "$A" run "$T/b1.yaml" --out "$T/o"
printf 'model: no-such-model\nhardware: h200\n' > "$T/b2.yaml"
expect 2 "b2.yaml:1:8: unknown model preset 'no-such-model'" -- "$A" run "$T/b2.yaml" --out "$T/o"
printf 'model: qwen3-30b-a3b\nhardware: [h200\n' > "$T/b3.yaml"
expect 2 "b3.yaml:3:1: " -- "$A" run "$T/b3.yaml" --out "$T/o"
printf 'model: qwen3-30b-a3b\nhardware: h200\npolicies: [{verifier: magic}]\n' > "$T/b4.yaml"
expect 2 "b4.yaml:3:23: unknown verifier policy 'magic'" -- "$A" run "$T/b4.yaml" --out "$T/o"
expect 2 "--set workload.tree.nodes=0: workload.tree.nodes = 0 is out of range" -- \
  "$A" run tests/fixtures/golden.yaml --set workload.tree.nodes=0 --out "$T/o"
# checks against the model name the key's place, and run beside the file's other errors
printf 'model: qwen3-30b-a3b\nhardware: h200\nworkload:\n  top_m: 500\n  routing: {skew: [0.1, 0.2]}\nbogus: 1\n' >"$T/b5.yaml"
out=$("$A" run "$T/b5.yaml" --out "$T/o" 2>&1)
grep -q "b5.yaml:4:10: workload.top_m 500 must be in the model's top_k..experts (8..128)" <<<"$out" &&
  grep -q "b5.yaml:5:19: workload.routing.skew lists 2 values" <<<"$out" && grep -q "b5.yaml:6:1: unknown key 'bogus'" <<<"$out" &&
  ok || bad "model-dependent checks without their place, or hidden by another error: $out"
expect 2 "^--set workload.top_m: workload.top_m 600 must be in" -- "$A" run tests/fixtures/golden.yaml --set workload.top_m=600 --out "$T/o"
[ ! -e "$T/o/summary.csv" ] && ok || bad "a bad spec wrote results"

# traces: gen, round trip through blocks-jsonl, truncation and corruption
expect 0 "wrote 12 blocks" -- "$A" gen tests/fixtures/golden.yaml --set workload.blocks=12 -o "$T/w.amt"
expect 0 "wrote 12 blocks" -- "$A" gen tests/fixtures/golden.yaml --set workload.blocks=12 -o "$T/w.jsonl"
expect 0 "wrote 12 blocks" -- "$A" import --format blocks-jsonl "$T/w.jsonl" --model olmoe-1b-7b -o "$T/w2.amt"
# a trace replays to the same results as the generator that wrote it: every
# policy (logits read) and natural alone (logits skipped); same p̂ for both
C='commitment.table=[1, 0.8, 0.6, 0.4, 0.2]'
for P in 'policies=[natural]' 'policies=[natural, acceptmoe, {verifier: moe-spec, budget: 12}, oracle]'; do
  "$A" run tests/fixtures/golden.yaml --set workload.blocks=12 --set "$C" --set "$P" --out "$T/rs" --quiet >/dev/null 2>&1
  "$A" run tests/fixtures/golden.yaml --set workload.source=trace --set workload.path="$T/w.amt" \
    --set workload.blocks=0 --set "$C" --set "$P" --out "$T/rt" --quiet >/dev/null 2>&1
  cmp -s "$T/rs/summary.csv" "$T/rt/summary.csv" && cmp -s "$T/rs/layers.csv" "$T/rt/layers.csv" && ok ||
    bad "replaying the trace differs from generating it ($P)"
done
if "$A" inspect "$T/w.amt" --json > "$T/i1" && "$A" inspect "$T/w2.amt" --json > "$T/i2" &&
   grep -q '"blocks":[1-9]' "$T/i1" &&
   diff <(sed 's/"input":"[^"]*",//' "$T/i1") <(sed 's/"input":"[^"]*",//' "$T/i2") >/dev/null; then ok
else bad "jsonl round trip changes the workload (or inspect failed)"; fi
# router probabilities are computed once per node-layer and shared by the
# rows: a row's results do not depend on which rows ran before it (ecospec
# verifies a subset of 36 candidates, some already computed for eagle's)
for P in 'policies=[{draft: ecospec, verifier: acceptmoe}]' \
         'policies=[{verifier: acceptmoe}, {draft: ecospec, verifier: acceptmoe}]'; do
  "$A" run tests/fixtures/golden.yaml --set workload.blocks=12 --set workload.tree.candidates=36 --set "$P" \
    --out "$T/pc" --quiet >/dev/null 2>&1
  grep ecospec "$T/pc/summary.csv" >> "$T/pc.rows"
done
[ "$(sort -u "$T/pc.rows" | wc -l)" -eq 2 ] && [ "$(wc -l < "$T/pc.rows")" -eq 4 ] && ok ||
  bad "a row's results depend on the rows before it"
# traces of older versions replay like a version-4 trace of the same blocks
# (tests/fixtures/tiny_v2.amt and tiny_v3.amt, written from tiny.yaml by
# those versions' writers: version 2 stores no normalisers, version 3 all
# logits in one section; `gen` from such a trace writes version 4); without
# moe-spec a version-4 trace is read without the logits past the top-k
for v in tiny_v2 tiny_v3; do
  "$A" gen tests/fixtures/tiny.yaml --set workload.source=trace --set workload.path=tests/fixtures/$v.amt \
    --set workload.blocks=0 -o "$T/$v.v4.amt" >/dev/null 2>&1 || bad "gen from $v.amt failed"
done
for pol in all top; do
  for v in tiny_v2 tiny_v3 tiny_v2.v4 tiny_v3.v4; do
    p=tests/fixtures/$v.amt; [ -e "$p" ] || p="$T/$v.amt"
    args=(--set workload.source=trace --set workload.path="$p" --set workload.blocks=0)
    [ $pol = top ] && args+=(--set 'policies=[natural, acceptmoe, oracle]')
    "$A" run tests/fixtures/tiny.yaml "${args[@]}" --out "$T/$v$pol" --quiet >/dev/null 2>&1
  done
  for v in tiny_v2 tiny_v3; do
    [ -s "$T/$v.v4$pol/summary.csv" ] && cmp -s "$T/$v$pol/summary.csv" "$T/$v.v4$pol/summary.csv" &&
      cmp -s "$T/$v$pol/layers.csv" "$T/$v.v4$pol/layers.csv" && ok || bad "a trace of $v replays differently ($pol)"
  done
done
cp tests/fixtures/tiny_v2.amt "$T/v9.amt"; printf '\011' | dd of="$T/v9.amt" bs=1 seek=8 conv=notrunc 2>/dev/null
expect 2 "byte offset 8: version 9, this build reads 2 to 4" -- "$A" inspect "$T/v9.amt"
size=$(stat -c %s "$T/w.amt")
head -c $((size / 2)) "$T/w.amt" > "$T/cut.amt"
expect 2 "byte offset" -- "$A" inspect "$T/cut.amt"
cp "$T/w.amt" "$T/flip.amt" # change one byte in the middle of the data
printf '\125' | dd of="$T/flip.amt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
cmp -s "$T/w.amt" "$T/flip.amt" && printf '\252' | dd of="$T/flip.amt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
expect 2 "block [0-9]+ at byte offset [0-9]+: checksum mismatch" -- "$A" inspect "$T/flip.amt"
printf 'name: t\nmodel: olmoe-1b-7b\nhardware: h200\nworkload: {source: trace, path: %s}\n' "$T/cut.amt" > "$T/t.yaml"
expect 2 "byte offset" -- "$A" run "$T/t.yaml" --out "$T/tr"
[ ! -e "$T/tr/summary.csv" ] && ok || bad "a failed run left a summary"
leftover=$(find "$T/tr" -name '*.tmp.*' 2>/dev/null | head -1)
[ -z "$leftover" ] && ok || bad "temporary files left behind: $leftover"
printf '{"parent":[-1,0],"logp":[0,-1],"accepted":[1,1],"topk":[[[[1,0.5]]]]}\n{"parent": [-1\n' > "$T/bad.jsonl"
expect 2 "bad.jsonl:[12]:" -- "$A" inspect "$T/bad.jsonl" --format blocks-jsonl --model olmoe-1b-7b
# an expert listed twice in a node's top-m pairs (mixtral: 32 layers, m = 8)
{ printf '{"parent":[-1],"logp":[0],"accepted":[1],"topk":['
  for l in $(seq 0 31); do
    [ "$l" -gt 0 ] && printf ','
    if [ "$l" -eq 5 ]; then printf '[[[3,0.5],[3,0.5],[0,0],[1,0],[2,0],[4,0],[5,0],[6,0]]]'
    else printf '[[[3,0.5],[7,0.4],[0,0],[1,0],[2,0],[4,0],[5,0],[6,0]]]'; fi
  done
  printf ']}\n'; } > "$T/dup.jsonl"
expect 2 "dup.jsonl:1: layer 5 node 0: expert 3 stored twice" -- "$A" inspect "$T/dup.jsonl" --format blocks-jsonl --model mixtral-8x7b
printf '{"problem_id":0,"layer":0,"token_idx":0,"experts":[1],"gating_probs":[1]}\n' > "$T/r.jsonl"
expect 2 "r.jsonl:1: experts and gating_probs must have top_k = 2" -- "$A" inspect "$T/r.jsonl" --format routing-jsonl --model mixtral-8x7b
# an expert listed twice among a token's top-8, the copies apart once sorted by weight (olmoe: 16 layers)
for l in $(seq 0 15); do
  x='[1,2,3,4,5,6,7,8]'; [ "$l" -eq 3 ] && x='[1,2,3,2,5,6,7,8]'
  printf '{"problem_id":0,"layer":%d,"token_idx":0,"experts":%s,"gating_probs":[0.3,0.2,0.15,0.1,0.09,0.08,0.05,0.03]}\n' "$l" "$x"
done > "$T/r2.jsonl"
expect 2 "r2.jsonl:4: expert 2 is listed twice" -- "$A" inspect "$T/r2.jsonl" --format routing-jsonl --model olmoe-1b-7b
# a real trace as hybrid blocks: generated trees around the real tokens (olmoe: 16 layers, top-8)
for l in $(seq 0 15); do for t in $(seq 0 11); do
  x=$(( (t * 3 + l) % 64 ))
  printf '{"problem_id":3,"layer":%d,"token_idx":%d,"experts":[%d,%d,%d,%d,%d,%d,%d,%d],"gating_probs":[0.3,0.2,0.15,0.1,0.09,0.08,0.05,0.03]}\n' \
    "$l" "$t" $x $(( (x + 8) % 64 )) $(( (x + 16) % 64 )) $(( (x + 24) % 64 )) $(( (x + 32) % 64 )) \
    $(( (x + 40) % 64 )) $(( (x + 48) % 64 )) $(( (x + 56) % 64 ))
done; done > "$T/r3.jsonl"
expect 0 'committed tokens 12, nodes/block (6[0-4]|[1-5][0-9])\.' -- "$A" inspect "$T/r3.jsonl" --format routing-jsonl \
  --model olmoe-1b-7b --hybrid
expect 0 '"blocks":"hybrid"' -- "$A" import --format routing-jsonl "$T/r3.jsonl" --model olmoe-1b-7b --hybrid -o "$T/r3.amt"
expect 0 'committed tokens 12, nodes/block 6\.00' -- "$A" inspect "$T/r3.jsonl" --format routing-jsonl \
  --model olmoe-1b-7b --window 6
# gating probabilities become logits the model's router maps back to them: the same
# renormalised top-1 weight (0.3) under a softmax (olmoe) and a sigmoid-normalized router (deepseek-v3)
for ml in olmoe-1b-7b:16 deepseek-v3:58; do
  mname=${ml%%:*}; mlayers=${ml##*:}
  for l in $(seq 0 $((mlayers - 1))); do for t in 0 1 2; do
    x=$(( (t * 3 + l) % 64 ))
    printf '{"problem_id":0,"layer":%d,"token_idx":%d,"experts":[%d,%d,%d,%d,%d,%d,%d,%d],"gating_probs":[0.3,0.2,0.15,0.1,0.09,0.08,0.05,0.03]}\n' \
      "$l" "$t" $x $(( (x + 8) % 64 )) $(( (x + 16) % 64 )) $(( (x + 24) % 64 )) $(( (x + 32) % 64 )) \
      $(( (x + 40) % 64 )) $(( (x + 48) % 64 )) $(( (x + 56) % 64 ))
  done; done > "$T/w_$mname.jsonl"
  expect 0 "renormalised top-1 weight: 0\.300" -- "$A" inspect "$T/w_$mname.jsonl" --format routing-jsonl --model "$mname"
done
expect 2 "--hybrid applies to --format routing-jsonl" -- "$A" inspect "$T/dup.jsonl" --format blocks-jsonl \
  --model mixtral-8x7b --hybrid
expect 2 "routing_blocks.*(chain|hybrid)" -- "$A" run tests/fixtures/tiny.yaml --set workload.routing_blocks=tree --out "$T/rb"
# results directory that cannot be written
expect 1 "cannot (create|write)" -- "$A" run tests/fixtures/golden.yaml --out /proc/acceptmoe-test
# usage
expect 0 "usage: acceptmoe" -- "$A" --help
expect 2 "unknown command" -- "$A" frobnicate

# the harness path on the CPU reference backend: measured beside predicted
expect 0 "backend cpu: 2 of 2 layers" -- "$A" run tests/fixtures/tiny.yaml --backend cpu --out "$T/cpu"
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i} NR>1{if(!($c["measured_moe_time_per_block_s"]>0) || $c["backend"]!="cpu")exit 1} END{if(NR<4)exit 1}' \
  "$T/cpu/summary.csv" && ok || bad "measured columns missing from the backend run"
# offload on the reference: the layer runs from the slot pool in the cache's waves (test_moe checks the
# waves' sum against the resident output)
expect 0 "offload from the slot pool in the cache's waves" -- \
  "$A" run tests/fixtures/tiny.yaml --backend cpu --set offload.slots_per_layer=6 --out "$T/cpuoff"
awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i} NR>1 && $c["policy"]=="natural"{ok=($c["measured_fetch_time_per_block_s"]>0 && $c["predicted_fetch_time_per_block_s"]>0)} END{exit !ok}' \
  "$T/cpuoff/summary.csv" && ok || bad "offload fetches not executed on the backend"
expect 1 "needs a CUDA build|no CUDA device" -- "$A" calibrate-hw tests/fixtures/tiny.yaml -o "$T/cal.yaml"
# CUDA builds: the backends are a module loaded on first use; a missing one is an error, not a crash
if ! "$A" run tests/fixtures/tiny.yaml --backend skinny --out "$T/nomod" 2>&1 | grep -q "needs a CUDA build"; then
  expect 1 "cannot load the CUDA backends: .*none.so" -- env ACCEPTMOE_CUDA_MODULE="$T/none.so" \
    "$A" run tests/fixtures/tiny.yaml --backend skinny --out "$T/nomod"
fi
expect 2 "unknown backend" -- "$A" run tests/fixtures/tiny.yaml --backend warp --out "$T/cpu2"

# memory stays flat in trace length: replaying 1,000 blocks peaks no higher
# than replaying 100 (plus 2 MB of slack); needs GNU time
if [ -x /usr/bin/time ]; then
  "$A" gen tests/fixtures/golden.yaml --set workload.blocks=1000 -o "$T/m.amt" >/dev/null 2>&1
  for n in 100 1000; do
    /usr/bin/time -f "%M" -o "$T/rss$n" "$A" run tests/fixtures/golden.yaml --set workload.source=trace \
      --set workload.path="$T/m.amt" --set workload.blocks=$n --set offload.policy=lru --out "$T/mr$n" --quiet >/dev/null 2>&1
  done
  r1=$(tail -1 "$T/rss100"); r2=$(tail -1 "$T/rss1000")
  [ "$r2" -le $((r1 + 2048)) ] && ok || bad "peak memory grows with the trace: $r1 KB for 100 blocks, $r2 KB for 1,000"
  rm -f "$T/m.amt"
else
  echo "no GNU time: skipped the memory check"
fi

# sharded sweeps (6 points): run --shard I/N then merge gives the unsharded
# run's files byte for byte, for N = 1, 2, 3 and through GNU parallel;
# merge refuses a missing shard and shards of another run
S=tests/fixtures/sweep6.yaml
"$A" run $S --out "$T/sw" --quiet >/dev/null 2>&1
for N in 1 2 3; do
  for ((i = 0; i < N; i++)); do "$A" run $S --shard $i/$N --out "$T/sh$N-$i" --quiet >/dev/null 2>&1; done
  "$A" merge "$T"/sh$N-* --out "$T/mg$N" >/dev/null 2>&1
  same=1
  for f in summary.csv layers.csv meta.json spec.resolved.yaml; do cmp -s "$T/sw/$f" "$T/mg$N/$f" || same=0; done
  [ "$same" = 1 ] && ok || bad "merging $N shards differs from the unsharded run"
done
expect 2 "shard 2/3 is missing" -- "$A" merge "$T/sh3-0" "$T/sh3-1" --out "$T/mgx"
"$A" run $S --set workload.seed=9 --shard 1/2 --out "$T/other" --quiet >/dev/null 2>&1
expect 2 "not a shard of the same run" -- "$A" merge "$T/sh2-0" "$T/other" --out "$T/mgy"
if command -v parallel >/dev/null; then
  ACCEPTMOE="$A" scripts/sweep-parallel.sh $S 3 "$T/par" >/dev/null 2>&1
  same=1
  for f in summary.csv layers.csv meta.json; do cmp -s "$T/sw/$f" "$T/par/$f" || same=0; done
  [ "$same" = 1 ] && ok || bad "scripts/sweep-parallel.sh differs from the unsharded run"
else
  echo "no GNU parallel: skipped scripts/sweep-parallel.sh"
fi

# progress: a long generation shows a progress line on a terminal, none
# when stderr is not one (needs util-linux script for the terminal)
if command -v script >/dev/null; then
  n=$(script -qc "$A gen workloads/specs/quickstart.yaml --threads 1 --set workload.blocks=2000 -o $T/pg.amt" /dev/null |
      tr '\r' '\n' | grep -c "blocks/s")
  [ "$n" -ge 1 ] && ok || bad "no progress line on a terminal"
fi
n=$("$A" gen workloads/specs/quickstart.yaml --threads 1 --set workload.blocks=400 -o "$T/pg.amt" 2>&1 | grep -c "blocks/s")
[ "$n" -eq 0 ] && ok || bad "a progress line where stderr is not a terminal"
rm -f "$T/pg.amt"

# routing-safetensors: the same records as routing-jsonl give the same
# statistics (a ragged file, and the real Mixtral trace where present);
# corrupt and truncated files name the tensor and byte offset; an ids-only
# capture goes through fit
if command -v python3 >/dev/null; then
  CAP=scripts/capture/routing_safetensors.py
  python3 $CAP tests/bad-inputs/ragged-routing.jsonl "$T/rr.safetensors" --layers 16 --top-k 8 --experts 64 2>/dev/null
  "$A" inspect tests/bad-inputs/ragged-routing.jsonl --format routing-jsonl --model olmoe-1b-7b --window 4 --json |
    sed 's/"input":"[^"]*"//' >"$T/rj.json"
  "$A" inspect "$T/rr.safetensors" --format routing-safetensors --model olmoe-1b-7b --window 4 --json |
    sed 's/"input":"[^"]*"//' >"$T/rs.json"
  [ -s "$T/rj.json" ] && cmp -s "$T/rj.json" "$T/rs.json" && ok || bad "routing-safetensors and routing-jsonl statistics differ"
  if [ -f "$REAL/mixtral-8x7b-routing/gsm8k_routing.jsonl" ]; then
    python3 $CAP "$REAL/mixtral-8x7b-routing/gsm8k_routing.jsonl" "$T/mx.safetensors" --layers 32 --top-k 2 --experts 8 2>/dev/null
    "$A" inspect "$REAL/mixtral-8x7b-routing/gsm8k_routing.jsonl" --format routing-jsonl --model mixtral-8x7b --json |
      sed 's/"input":"[^"]*"//' >"$T/mj.json"
    "$A" inspect "$T/mx.safetensors" --format routing-safetensors --model mixtral-8x7b --json | sed 's/"input":"[^"]*"//' >"$T/ms.json"
    cmp -s "$T/mj.json" "$T/ms.json" && ok || bad "the Mixtral trace's statistics differ between the two formats"
  fi
  head -c 300 "$T/rr.safetensors" >"$T/cut.safetensors"
  expect 2 "tensor '[a-z_]+'.*(data_offsets do not fit|byte offset)|header length" -- \
    "$A" inspect "$T/cut.safetensors" --format routing-safetensors --model olmoe-1b-7b
  printf '\377\377\377\377\0\0\0\0{}' >"$T/big.safetensors"
  expect 2 "byte offset 0: header length [0-9]+ does not fit the file" -- \
    "$A" inspect "$T/big.safetensors" --format routing-safetensors --model olmoe-1b-7b
  expect 2 "tensor 'experts' has shape \[10, 16, 8\]; the model needs \[tokens, 32, 2\]" -- \
    "$A" inspect "$T/rr.safetensors" --format routing-safetensors --model mixtral-8x7b
  sed 's/,"gating_probs":\[[^]]*\]//' tests/bad-inputs/ragged-routing.jsonl >"$T/ids.jsonl"
  python3 $CAP "$T/ids.jsonl" "$T/ids.safetensors" --layers 16 --top-k 8 --experts 64 2>/dev/null
  expect 0 "^routing:" -- "$A" fit workloads/specs/fit-olmoe.yaml --trace "$T/ids.safetensors" --format routing-safetensors \
    --window 4 --blocks 40 --quiet
  # engine captures (synthetic inputs in each engine's layout; the same
  # tokens as routing-jsonl decode records): identical statistics
  C=tests/fixtures/capture
  python3 scripts/capture/engines.py vllm $C/vllm.jsonl "$T/v.st" --experts 64 --top-k 8 2>/dev/null
  python3 scripts/capture/engines.py sglang $C/sglang.jsonl "$T/s.st" --experts 64 --top-k 8 --layers 17 --dense-layers 0 2>/dev/null
  # vLLM's fields in an HTTP response's first choice read as at the top of a line
  python3 -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(json.dumps({"object": "text_completion", "prompt_routed_experts": r["prompt_routed_experts"],
                      "choices": [{"index": 0, "text": "", "routed_experts": r["routed_experts"]}]}))' \
    $C/vllm.jsonl >"$T/vh.jsonl"
  python3 scripts/capture/engines.py vllm "$T/vh.jsonl" "$T/vh.st" --experts 64 --top-k 8 2>/dev/null
  cmp -s "$T/v.st" "$T/vh.st" && ok || bad "vLLM's HTTP response layout converts differently"
  # a decode capture fitted with a chain spec (a 1-node tree at tau 1): its
  # windows are chains of real tokens, not draft trees, so no tree target
  # (and no tau the user never set) enters the fit
  "$A" fit workloads/specs/fit-olmoe.yaml --trace "$T/v.st" --format routing-safetensors --window 8 --blocks 40 \
    --set workload.tree.nodes=1 --set workload.tree.top_k=1 --set workload.tree.depth=1 --set workload.acceptance.tau=1 \
    >"$T/vfit.out" 2>&1 && grep -q '^routing:' "$T/vfit.out" && ! grep -qi 'tree union\|acceptance.tau' "$T/vfit.out" && ok ||
    bad "fit --trace of a vLLM decode capture with a chain spec: $(tail -3 "$T/vfit.out")"
  "$A" inspect $C/decode.jsonl --format routing-jsonl --model olmoe-1b-7b --window 3 --json | sed 's/"input":"[^"]*"//' >"$T/d.json"
  for f in v s; do
    "$A" inspect "$T/$f.st" --format routing-safetensors --model olmoe-1b-7b --window 3 --json | sed 's/"input":"[^"]*"//' >"$T/$f.json"
    [ -s "$T/d.json" ] && cmp -s "$T/d.json" "$T/$f.json" && ok || bad "the $f capture's statistics differ from routing-jsonl's"
  done
  # SGLang's per_token recorder dump (torch.save's archive; written without
  # torch where it is absent) to chain blocks-jsonl: the blocks it stands
  # for, byte for byte, which the importer reads and a run replays; a tree
  # draft is refused with the pass named
  python3 tests/sglang_dump.py "$T/pt.pt" "$T/pt_truth.jsonl" 2>/dev/null
  python3 scripts/capture/sglang_per_token.py "$T/pt.pt" "$T/pt.jsonl" --experts 64 2>"$T/pt.err"
  [ -s "$T/pt.jsonl" ] && cmp -s "$T/pt.jsonl" "$T/pt_truth.jsonl" && ok || bad "sglang per_token conversion: $(cat "$T/pt.err")"
  grep -q "12 blocks from 3 requests (16 MoE layers of 17); 3 last verify passes left out" "$T/pt.err" && ok ||
    bad "sglang per_token: $(cat "$T/pt.err")"
  expect 0 '"blocks":12,"requests":3,"committed_tokens":21' -- \
    "$A" inspect "$T/pt.jsonl" --format blocks-jsonl --model olmoe-1b-7b --json
  python3 tests/sglang_dump.py "$T/tree.pt" "$T/tree_truth.jsonl" --tree 2>/dev/null
  expect 2 "forward pass 3: positions \[7, 8, 8, 9\] are not one chain" -- \
    python3 scripts/capture/sglang_per_token.py "$T/tree.pt" "$T/tree.jsonl" --experts 64
  [ ! -e "$T/tree.jsonl" ] && [ ! -e "$T/tree.jsonl.tmp" ] && ok || bad "a refused dump left a file"
  # with torch (a python3 that has it: Debian's python3-torch lives in the
  # system interpreter): the converter reads a real torch.save dump, and
  # torch.load reads the archive the stand-in writer makes; the Hugging
  # Face conversion against the rule computed plainly
  TPY=
  for p in python3 /usr/bin/python3; do "$p" -c "import torch" 2>/dev/null && { TPY=$p; break; }; done
  if [ -n "$TPY" ]; then
    "$TPY" tests/sglang_dump.py "$T/ptt.pt" "$T/ptt_truth.jsonl" 2>/dev/null
    python3 scripts/capture/sglang_per_token.py "$T/ptt.pt" "$T/ptt.jsonl" --experts 64 2>/dev/null
    cmp -s "$T/ptt.jsonl" "$T/ptt_truth.jsonl" && ok || bad "a real torch.save dump read without torch differs"
    "$TPY" scripts/capture/sglang_per_token.py "$T/pt.pt" "$T/ptl.jsonl" --experts 64 2>/dev/null
    cmp -s "$T/ptl.jsonl" "$T/pt_truth.jsonl" && ok || bad "torch.load of the stand-in archive differs"
    expect 0 "^ok$" -- "$TPY" tests/hf_rows.py
  else
    echo "no torch: skipped the torch.save cross-checks and the Hugging Face conversion"
  fi
  "${TPY:-python3}" -c "import transformers" 2>/dev/null ||
    echo "no transformers: the Hugging Face converter's model loading is not exercised"
else
  echo "no python3: skipped the routing-safetensors checks"
fi

# each command takes the options its row states and refuses the others,
# and every option its synopsis shows is one it takes
expect 2 "acceptmoe gen: --backend is not an option of this command" -- \
  "$A" gen workloads/specs/quickstart.yaml --backend nonsense --repeats 3 -o "$T/x.amt"
expect 2 "acceptmoe presets: takes no arguments" -- "$A" presets --json
expect 2 "acceptmoe policies: --json is not an option of this command" -- "$A" policies --json
miss=""
while read -r cmd opt; do
  "$A" "$cmd" "$opt" </dev/null 2>&1 | grep -q "is not an option" && miss+=" $cmd $opt"
done < <("$A" --help | awk '/^  [a-z]/{cmd=$1} /^  [a-z]/||/^               /{for(i=1;i<=NF;i++){t=$i; gsub(/[][(|)]/," ",t); n=split(t,w," "); for(j=1;j<=n;j++) if(w[j] ~ /^-/) print cmd, w[j]}}' | sort -u)
[ -z "$miss" ] && ok || bad "options in the usage that their command refuses:$miss"

# the generated blocks of README.md, docs/spec.md (policy tables, key list, resolved quickstart),
# docs/validation.md and docs/outcomes.md (from the reference results) are what makes them
ACCEPTMOE="$A" scripts/docs-generated.sh --check 2>"$T/dp.err" && ok || bad "$(cat "$T/dp.err")"
# ... and a stale block fails the check: a copy of what the generator reads, the matrix's MAPE changed
mkdir -p "$T/dg/scripts" "$T/dg/docs" "$T/dg/results" "$T/dg/sim/engine"
cp scripts/docs-generated.sh scripts/papers-table.sh "$T/dg/scripts/"
cp README.md "$T/dg/"
cp docs/spec.md docs/validation.md docs/outcomes.md "$T/dg/docs/"
cp -r results/reference "$T/dg/results/"
cp -r workloads "$T/dg/"
cp sim/engine/accept.h "$T/dg/sim/engine/"
awk '/<!-- BEGIN generated: cells-mape -->/ { on = 1 } on && /^\| all \|/ && !done { sub(/[0-9.]+%/, "99.9%"); done = 1 } { print }' \
  docs/validation.md >"$T/dg/docs/validation.md"
if cmp -s docs/validation.md "$T/dg/docs/validation.md"; then bad "the planted stale block did not change validation.md"
else
  ACCEPTMOE="$(cd "$(dirname "$A")" && pwd)/$(basename "$A")" "$T/dg/scripts/docs-generated.sh" --check 2>"$T/dg.err" && bad "a stale validation.md block passed the check" ||
    { grep -q "validation.md's cells-mape block differs" "$T/dg.err" && ok || bad "stale block: $(cat "$T/dg.err")"; }
fi
"$A" keys --markdown | awk -F' [|] ' 'NR > 2 && $3 !~ /[a-z]/ { print; bad = 1 } END { exit bad }' >"$T/keys.bad" && ok || bad "keys without a help line: $(cat "$T/keys.bad")"
# the README's example table is what the quickstart run prints
"$A" run workloads/specs/quickstart.yaml --out "$T/qs" 2>/dev/null | grep '^|' >"$T/qs.table"
awk '/^Example \(`scripts\/quickstart.sh`/ { on = 1; next } on && /^\|/ { print; got = 1; next } got { exit }' README.md >"$T/readme.table"
if [ -s "$T/qs.table" ] && cmp -s "$T/qs.table" "$T/readme.table"; then ok
else bad "README.md's example table differs from the quickstart run: $(diff "$T/readme.table" "$T/qs.table" | head -4)"; fi

fi
if want matrix; then
# every policy row against every source kind, resident and offloaded, on one
# GPU, eight (EP8) and a pipeline, and under the transformers engine: the
# rows come from `acceptmoe policies` (a required parameter at its
# example), so a row added later is tried too; each run must finish with a
# result row per policy and leave no temporary file
pol=$("$A" policies | awk '/^drafts/{k="draft";next} /^verifiers/{k="verifier";next}
  /^  [a-z]/{if(n)print n"}"; n="{"k": "$1; next} /required /{sub(":","",$1); sub(/^\(e.g./,"",$3); sub(/\),$/,"",$4); n=n", "$1": "$4} END{print n"}"}' |
  grep -v -e '{draft: eagle}' -e '{verifier: natural}' | paste -sd, -)
pol="natural, $pol" # (eagle draft and natural verifier: the one natural row)
npol=$(awk -F'},' '{print NF + 0}' <<<"$pol")
cat >"$T/mx.yaml" <<YAML
name: matrix
model: {preset: olmoe-1b-7b, top_k: 8}
hardware: h200
workload: {blocks: 8, seed: 3, tree: {depth: 4, top_k: 6, nodes: 24}, acceptance: {tau: 3.0}}
commitment: {calibrate: {blocks: 20, seed: 4}}
policies: [$pol]
YAML
"$A" gen "$T/mx.yaml" -o "$T/mx.amt" >/dev/null 2>&1
"$A" gen "$T/mx.yaml" -o "$T/mx.jsonl" >/dev/null 2>&1
srcs=("synthetic|" "trace|--set workload.source=trace --set workload.path=$T/mx.amt"
  "blocks-jsonl|--set workload.source=blocks-jsonl --set workload.path=$T/mx.jsonl"
  "routing-jsonl|--set workload.source=routing-jsonl --set workload.path=tests/bad-inputs/ragged-routing.jsonl --set workload.window=4")
[ -s "$T/rr.safetensors" ] || python3 scripts/capture/routing_safetensors.py tests/bad-inputs/ragged-routing.jsonl \
  "$T/rr.safetensors" --layers 16 --top-k 8 --experts 64 >/dev/null 2>&1 # (this part alone)
[ -s "$T/rr.safetensors" ] && srcs+=("routing-safetensors|--set workload.source=routing-safetensors --set workload.path=$T/rr.safetensors --set workload.window=4")
lays=("one GPU|" "EP8|--set hardware.gpus=8 --set hardware.interconnect=nvlink4"
  "pipeline 2|--set hardware.gpus=2 --set hardware.interconnect=nvlink4 --set parallel.pipeline=2"
  "transformers|--set engine=hf-transformers-4.57")
tried=0 failed=""
for sr in "${srcs[@]}"; do
  for ly in "${lays[@]}"; do
    for off in resident offload; do
      read -r -a a1 <<<"${sr#*|}"; read -r -a a2 <<<"${ly#*|}"
      o=(); [ $off = offload ] && o=(--set offload.slots_per_layer=24)
      rm -rf "$T/mx"
      if "$A" run "$T/mx.yaml" ${a1[@]+"${a1[@]}"} ${a2[@]+"${a2[@]}"} ${o[@]+"${o[@]}"} --out "$T/mx" --quiet \
           >/dev/null 2>"$T/mx.err" &&
         [ "$(($(wc -l <"$T/mx/summary.csv") - 1))" -ge "$npol" ] && ! ls "$T"/mx/*.tmp.* >/dev/null 2>&1; then
        tried=$((tried + 1))
      else failed+=" [${sr%%|*} / ${ly%%|*} / $off: $(head -c 300 "$T/mx.err")]"; fi
    done
  done
done
[ -z "$failed" ] && [ "$tried" -ge 32 ] && ok || bad "policy x source matrix ($tried runs passed):$failed"

fi
if want core; then
# the bad-input catalogue (tests/bad-inputs/README.md): exact message and
# exit status for each class of mistake, and an earlier result left as it was
B=tests/bad-inputs
mkdir -p "$T/keep"; echo "earlier" >"$T/keep/summary.csv"
expect 2 "wrong-type.yaml:4:20: workload.blocks must be an integer, not 'many'" -- "$A" run $B/wrong-type.yaml --out "$T/keep"
expect 2 "unknown-key.yaml:4:24: unknown key 'workload.sed' \(did you mean 'workload.seed'\?\)" -- "$A" run $B/unknown-key.yaml --out "$T/keep"
expect 2 "model custom: hidden \(d\) is required for a shape" -- "$A" run $B/shape-missing-field.yaml --out "$T/keep"
expect 2 "trace is for 2 MoE layers x 8 experts, top-2; the model qwen3-30b-a3b has 48 x 128, top-8" -- \
  "$A" run workloads/specs/quickstart.yaml --set workload.source=trace --set workload.path=$B/other-model.amt --out "$T/keep"
[ "$(cat "$T/keep/summary.csv")" = earlier ] && ! ls "$T"/keep/*.tmp.* >/dev/null 2>&1 && ok || bad "a failed run touched earlier results"
expect 0 "ragged layers cut to the shortest: 15 token-layer records dropped" -- \
  "$A" inspect $B/ragged-routing.jsonl --format routing-jsonl --model olmoe-1b-7b --window 4
expect 2 "nan-logits.jsonl:1:60: invalid token near 'NaN'" -- "$A" inspect $B/nan-logits.jsonl --format blocks-jsonl --model mixtral-8x7b
expect 2 "inf-logits.jsonl:1:62: real number overflow near '1e999'" -- "$A" inspect $B/inf-logits.jsonl --format blocks-jsonl --model mixtral-8x7b
expect 2 "duplicate-experts.jsonl:1: expert 3 is listed twice" -- "$A" inspect $B/duplicate-experts.jsonl --format routing-jsonl --model mixtral-8x7b
# a check that needs the model still names the policy's place in the spec
printf 'name: pos\nmodel: qwen3-30b-a3b\nhardware: h200\nworkload: {blocks: 5}\npolicies:\n  - natural\n  - {verifier: acceptmoe-fix, budget: 500}\n  - natural\n' >"$T/pos.yaml"
expect 2 "pos.yaml:7:5: policy acceptmoe-fix/B=500: budget 500 must be in top_k..experts" -- "$A" run "$T/pos.yaml" --out "$T/pos" --quiet
expect 2 "pos.yaml:8:5: policy natural is listed twice" -- "$A" run "$T/pos.yaml" --out "$T/pos" --quiet
expect 2 "negative-probability.jsonl:1: gating_probs\[0\] must be in \(0, 1\]" -- \
  "$A" inspect $B/negative-probability.jsonl --format routing-jsonl --model mixtral-8x7b

# crash safety: a run killed (SIGKILL) at any moment leaves each result
# file as it was or complete, never partial; SIGINT stops the run, removes
# its temporary files, keeps the previous results and exits 130
"$A" run tests/fixtures/golden.yaml --out "$T/safe" --quiet >/dev/null 2>&1
"$A" run tests/fixtures/golden.yaml --set workload.blocks=600 --out "$T/new" --quiet >/dev/null 2>&1
cp -r "$T/safe" "$T/old"
for delay in 0.2 1 2.5; do
  "$A" run tests/fixtures/golden.yaml --set workload.blocks=600 --out "$T/safe" --quiet >/dev/null 2>&1 &
  pid=$!; sleep "$delay"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  whole=1
  for f in summary.csv layers.csv; do
    cmp -s "$T/safe/$f" "$T/old/$f" || cmp -s "$T/safe/$f" "$T/new/$f" || whole=0
  done
  [ "$whole" = 1 ] && ok || bad "SIGKILL after ${delay}s left a partial result file"
  rm -f "$T"/safe/*.tmp.*; cp "$T"/old/*.csv "$T/safe/"
done
"$A" run tests/fixtures/golden.yaml --set workload.blocks=3000 --out "$T/safe" --quiet >"$T/int.out" 2>"$T/int.err" &
pid=$!; sleep 1; kill -INT "$pid"; wait "$pid"; rc=$?
if [ "$rc" = 130 ] && grep -q "interrupted" "$T/int.err" && ! ls "$T"/safe/*.tmp.* >/dev/null 2>&1 &&
   cmp -s "$T/safe/summary.csv" "$T/old/summary.csv"; then ok
else bad "SIGINT: exit $rc, $(cat "$T/int.err"), temporaries: $(ls "$T"/safe/ | tr '\n' ' ')"; fi

# requests as engines serve them: a prefill that bypasses the caches leaves
# every decode figure as without a prompt; one that goes through them moves
# the decode hit rate and brings its own bytes and time, reported apart
pf=(--set workload.blocks=60 --set offload.slots_per_layer=24 --set workload.tokens_per_request=64 --quiet)
"$A" run tests/fixtures/golden.yaml "${pf[@]}" --out "$T/p0" >/dev/null 2>&1
"$A" run tests/fixtures/golden.yaml "${pf[@]}" --set workload.prompt_tokens=96 --set offload.prefill=bypass --out "$T/pb" >/dev/null 2>&1
"$A" run tests/fixtures/golden.yaml "${pf[@]}" --set workload.prompt_tokens=96 --out "$T/pt" >/dev/null 2>&1
decode='NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}{print $c["policy"],$c["tokens_per_s"],$c["cache_hit_rate"],$c["h2d_bytes_per_token"]}'
pfc='NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}{print $c["prefill_s_per_request"],$c["prefill_h2d_bytes_per_request"]}'
if [ -s "$T/p0/summary.csv" ] && cmp -s <(awk -F, "$decode" "$T/p0/summary.csv") <(awk -F, "$decode" "$T/pb/summary.csv") &&
   ! cmp -s <(awk -F, "$decode" "$T/p0/summary.csv") <(awk -F, "$decode" "$T/pt/summary.csv") &&
   awk -F, "$pfc" "$T/pt/summary.csv" | awk '{if(!($1>0&&$2>0))exit 1}' &&
   awk -F, "$pfc" "$T/p0/summary.csv" | awk '{if($1!=0||$2!=0)exit 1}'; then ok
else bad "prefill: bypass should leave decode as without a prompt, through should move it"; fi
# the engine mode is stated in meta.json and spec.resolved.yaml
if grep -A1 '"engine": {' "$T/p0/meta.json" | grep -q '"cuda_graphs": true' &&
   grep -A1 '^engine:' "$T/p0/spec.resolved.yaml" | grep -q 'cuda_graphs: true'; then ok
else bad "engine mode missing from meta.json or spec.resolved.yaml"; fi
# several GPUs: a layout that does not multiply out names its keys
expect 2 "parallel.moe_ep \(4\) x parallel.moe_tp \(1\) = 4 must equal parallel.attention_tp \(8\)" -- "$A" run \
  tests/fixtures/golden.yaml --set hardware.gpus=8 --set hardware.interconnect=nvlink4 --set parallel.moe_ep=4 \
  --set parallel.moe_tp=1 --out "$T/bad" --quiet
expect 2 "parallel.attention_tp \(4\) must equal hardware.gpus \(8\)" -- "$A" run tests/fixtures/golden.yaml \
  --set hardware.gpus=8 --set hardware.interconnect=nvlink4 --set parallel.attention_tp=4 --out "$T/bad" --quiet
expect 2 "hardware.gpus 8 needs an interconnect" -- "$A" run tests/fixtures/golden.yaml --set hardware.gpus=8 \
  --out "$T/bad" --quiet
# DP attention: copies of attention_tp GPUs; the experts resolve over every GPU; a layout that does not multiply out is named
expect 2 "parallel.attention_tp x attention_dp \(4 x 4\) must equal hardware.gpus \(8\)" -- "$A" run tests/fixtures/golden.yaml \
  --set hardware.gpus=8 --set hardware.interconnect=nvlink4 --set parallel.attention_tp=4 --set parallel.attention_dp=4 \
  --out "$T/bad" --quiet
if "$A" run tests/fixtures/golden.yaml --set hardware.gpus=4 --set hardware.interconnect=nvlink4 \
     --set parallel.attention_dp=4 --set workload.blocks=20 --out "$T/dp" --quiet >/dev/null &&
   grep -q '^  attention_tp: 1$' "$T/dp/spec.resolved.yaml" && grep -q '^  attention_dp: 4$' "$T/dp/spec.resolved.yaml" &&
   grep -q '^  moe_ep: 4$' "$T/dp/spec.resolved.yaml" && ! grep -q 'attention_dp' "$T/p0/spec.resolved.yaml"; then ok
else bad "parallel.attention_dp: $(grep -A8 '^parallel' "$T/dp/spec.resolved.yaml")"; fi
# engine.sizing: SGLang's start-up rules fill what the spec leaves unset from the GPU's memory and the layout
# (a B200's 1.8e11 bytes, DP attention over 4: 16,384 tokens a step, 4,096 a copy, 512 requests a copy captured,
# 0.791 of the memory; test_serve works them by hand); a budget the spec sets wins; unset, nothing is written
if "$A" run tests/fixtures/golden.yaml --set hardware.gpus=4 --set hardware.interconnect=nvlink4 \
     --set hardware.memory_bytes=1.8e11 --set parallel.attention_dp=4 --set engine.sizing=sglang --set workload.blocks=20 \
     --out "$T/sz" --quiet >/dev/null &&
   "$A" run tests/fixtures/golden.yaml --set hardware.gpus=4 --set hardware.interconnect=nvlink4 \
     --set hardware.memory_bytes=1.8e11 --set parallel.attention_dp=4 --set engine.sizing=sglang \
     --set engine.max_batched_tokens=1024 --set workload.blocks=20 --out "$T/sz2" --quiet >/dev/null &&
   grep -q '^  max_batched_tokens: 16384$' "$T/sz/spec.resolved.yaml" &&
   grep -q '^  graph_capture_max_requests: 512$' "$T/sz/spec.resolved.yaml" &&
   grep -q '^  gpu_memory_utilization: 0\.791' "$T/sz/spec.resolved.yaml" &&
   grep -q '^  max_batched_tokens: 1024$' "$T/sz2/spec.resolved.yaml" &&
   ! grep -q 'graph_capture_max_requests' "$T/dp/spec.resolved.yaml"; then ok
else bad "engine.sizing: sglang: $(grep -A30 '^engine' "$T/sz/spec.resolved.yaml")"; fi

# experts: (§21): a GPU share of 1 is the resident run byte for byte (batch 4, 64-token prompts); the host
# computing half the experts, then all of them, is slower each time; AcceptMoE's residency pruning drops
# experts off the GPU (fewer executed than with every expert on it); bad placements are refused at their line
printf 'name: tiers\nmodel: olmoe-1b-7b\nhardware: h200\nworkload: {blocks: 40, seed: 3, batch: 4, prompt_tokens: 64, tree: {depth: 4, top_k: 6, nodes: 24}, acceptance: {tau: 3.0}}\npolicies: [natural, {verifier: acceptmoe}]\n' >"$T/tiers.yaml"
tps() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["policy"] == "natural" { print $c["tokens_per_s"] }' "$1/summary.csv"; }
ame() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["policy"] == "acceptmoe" { print $c["executed_mean"] }' "$1/summary.csv"; }
if "$A" run "$T/tiers.yaml" --out "$T/ti0" --quiet >/dev/null &&
   "$A" run "$T/tiers.yaml" --set host=xeon-6454s --set experts=cpu:1:random --out "$T/ti1" --quiet >/dev/null &&
   "$A" run "$T/tiers.yaml" --set host=xeon-6454s --set experts=cpu:0.5:uniform --out "$T/ti2" --quiet >/dev/null &&
   "$A" run "$T/tiers.yaml" --set host=xeon-6454s --set experts=cpu --out "$T/ti3" --quiet >/dev/null &&
   cmp -s "$T/ti0/summary.csv" "$T/ti1/summary.csv" && cmp -s "$T/ti0/layers.csv" "$T/ti1/layers.csv" &&
   awk -v a="$(tps "$T/ti0")" -v b="$(tps "$T/ti2")" -v c="$(tps "$T/ti3")" 'BEGIN { exit !(a > b && b > c) }' &&
   awk -v a="$(ame "$T/ti0")" -v b="$(ame "$T/ti2")" 'BEGIN { exit !(b < a) }' &&
   grep -q '^experts: "cpu"$' "$T/ti3/spec.resolved.yaml" && grep -q '^  name: "xeon-6454s"$' "$T/ti3/spec.resolved.yaml" &&
   ! grep -q '^host:' "$T/ti0/spec.resolved.yaml"; then ok
else bad "experts: share 1 not the resident run, or not slower off the GPU: $(tps "$T/ti0") $(tps "$T/ti2") $(tps "$T/ti3")"; fi
printf 'name: t\nmodel: olmoe-1b-7b\nhardware: h200\nhost: xeon-6454s\nexperts: "cpu:1.5:front"\n' >"$T/tb.yaml"
expect 2 "tb.yaml:5:10: experts: 'cpu:1.5:front': cpu:SHARE:STRATEGY takes the GPU's share from 0 to 1" -- "$A" run "$T/tb.yaml" --out "$T/bad"
expect 2 "no strategy 'hottest'" -- "$A" run "$T/tiers.yaml" --set host=xeon-6454s --set experts=cpu:0.5:hottest --out "$T/bad"
expect 2 "cpu-layers:N takes N from 0 to the model's 16 MoE layers" -- "$A" run "$T/tiers.yaml" --set host=xeon-6454s --set experts=cpu-layers:17 --out "$T/bad"
expect 2 "experts: cpu computes experts on the host: host: needs a preset" -- "$A" run "$T/tiers.yaml" --set experts=cpu --out "$T/bad"
expect 2 "unknown host preset 'xeon-9999'" -- "$A" run "$T/tiers.yaml" --set host=xeon-9999 --set experts=cpu --out "$T/bad"
expect 2 "two placements of the experts" -- "$A" run tests/fixtures/golden.yaml --set host=xeon-6454s --set experts=cpu --out "$T/bad"
# a host as a mapping over its preset (host: {preset: xeon-6454s, sockets: 2}), as the tier specs name it
if "$A" run workloads/specs/tiers-mtp-dsv3.yaml --set workload.blocks=20 --out "$T/tm" --quiet >/dev/null &&
   grep -q '^  sockets: 2$' "$T/tm/spec.resolved.yaml" && grep -q '^experts: "cpu"$' "$T/tm/spec.resolved.yaml"; then ok
else bad "host: {preset, sockets}: $(grep -A4 '^host' "$T/tm/spec.resolved.yaml")"; fi

expect 2 "unknown interconnect preset 'nvlink9'" -- "$A" run tests/fixtures/golden.yaml --set hardware.gpus=8 \
  --set hardware.interconnect=nvlink9 --out "$T/bad" --quiet
expect 2 "backend runs one GPU; this spec lays the model over 8" -- "$A" run tests/fixtures/golden.yaml --set hardware.gpus=8 \
  --set hardware.interconnect=nvlink4 --backend cpu --out "$T/bad" --quiet
# ... and one GPU stated in full is today's run, byte for byte
"$A" run tests/fixtures/golden.yaml --set hardware.gpus=1 --set parallel.attention_tp=1 --set parallel.moe_ep=1 \
  --set parallel.moe_tp=1 --out "$T/one" --quiet >/dev/null 2>&1
cmp -s "$T/one/summary.csv" "$T/g1/summary.csv" && ok || bad "one GPU stated in full differs from the default"
# a pipeline of stages: P = 1 stated is today's run byte for byte; its errors name the keys
"$A" run tests/fixtures/golden.yaml --set parallel.pipeline=1 --out "$T/pp1" --quiet >/dev/null 2>&1
cmp -s "$T/pp1/summary.csv" "$T/g1/summary.csv" && ok || bad "parallel.pipeline: 1 differs from the default"
expect 2 "parallel.pipeline \(4\) puts each stage of layers on one GPU: hardware.gpus must be 4" -- "$A" run \
  tests/fixtures/golden.yaml --set hardware.gpus=8 --set hardware.interconnect=nvlink4 --set parallel.pipeline=4 \
  --out "$T/bad" --quiet
expect 2 "parallel.pipeline needs the interconnect's hop_latency_s and hop_bw" -- "$A" run tests/fixtures/golden.yaml \
  --set hardware.gpus=2 --set hardware.interconnect=nvlink4 --set hardware.interconnect.hop_bw=0 \
  --set parallel.pipeline=2 --out "$T/bad" --quiet
"$A" run tests/fixtures/golden.yaml --set hardware.gpus=2 --set hardware.interconnect=nvlink4 --set parallel.pipeline=2 \
  --out "$T/pp2" --quiet >/dev/null 2>&1
if [ -s "$T/pp2/summary.csv" ] && ! cmp -s "$T/pp2/summary.csv" "$T/g1/summary.csv"; then ok
else bad "parallel.pipeline: 2 ran like one GPU or not at all"; fi
# an engine preset: loaded by name, overridden key by key, its mistakes named
"$A" run tests/fixtures/golden.yaml --set engine=hf-transformers-4.57 --set engine.visits=all-skip --out "$T/hf" \
  --quiet >/dev/null 2>&1
if grep -q '"preset": "hf-transformers-4.57"' "$T/hf/meta.json" && grep -q '"visits": "all-skip"' "$T/hf/meta.json" &&
   grep -q 'moe_kernels: loop' "$T/hf/spec.resolved.yaml"; then ok
else bad "engine preset or its override missing from meta.json / spec.resolved.yaml"; fi
expect 2 "unknown engine preset 'hf-transformers-9'" -- "$A" run tests/fixtures/golden.yaml \
  --set engine=hf-transformers-9 --out "$T/bad" --quiet
expect 2 "engine.moe_kernels: loop synchronises at every expert, so it cannot run under CUDA graphs" -- "$A" run \
  tests/fixtures/golden.yaml --set engine=hf-transformers-4.57 --set engine.cuda_graphs=true --out "$T/bad" --quiet
expect 2 "engine.visits is the loop's" -- "$A" run tests/fixtures/golden.yaml --set engine.visits=all --out "$T/bad" --quiet
# every engine preset loads and round-trips through spec.resolved.yaml (the speculative
# cycle's keys written where the engine sets them), and each new key's error names it
for ep in workloads/engines/*.yaml; do
  en=$(basename "$ep" .yaml); rm -rf "$T/ep1" "$T/ep2"
  if "$A" run tests/fixtures/golden.yaml --set engine="$en" --set workload.blocks=20 --out "$T/ep1" --quiet >/dev/null 2>&1 &&
     grep -q "\"preset\": \"$en\"" "$T/ep1/meta.json" &&
     "$A" run "$T/ep1/spec.resolved.yaml" --out "$T/ep2" --quiet >/dev/null 2>&1 &&
     cmp -s "$T/ep1/summary.csv" "$T/ep2/summary.csv"; then ok
  else bad "engine preset $en does not load or round-trip through spec.resolved.yaml"; fi
done
# every model preset loads, runs and round-trips through spec.resolved.yaml
printf 'name: preset\nmodel: olmoe-1b-7b\nhardware: h200\npolicies: [natural]\nworkload: {blocks: 20, seed: 3, tree: {depth: 2, top_k: 2, nodes: 4}, acceptance: {tau: 2.0}}\n' >"$T/mp.yaml"
for mp in workloads/models/*.yaml; do
  mn=$(basename "$mp" .yaml); rm -rf "$T/mp1" "$T/mp2"
  if "$A" run "$T/mp.yaml" --set model="$mn" --out "$T/mp1" --quiet >/dev/null 2>&1 &&
     grep -q "name: \"$mn\"" "$T/mp1/spec.resolved.yaml" &&
     "$A" run "$T/mp1/spec.resolved.yaml" --out "$T/mp2" --quiet >/dev/null 2>&1 &&
     cmp -s "$T/mp1/summary.csv" "$T/mp2/summary.csv"; then ok
  else bad "model preset $mn does not load, run or round-trip through spec.resolved.yaml"; fi
done
grep -q 'cycle_host_s: ' "$T/ep1/spec.resolved.yaml" && ok || bad "vllm's cycle terms are missing from its resolved spec"
! grep -q 'cycle_host_s' "$T/g1/spec.resolved.yaml" && ok || bad "an engine without cycle terms writes them"
for key in draft_step_s draft_token_s draft_extend_s tree_node_s sample_s cycle_host_s moe_call_host_s; do
  expect 2 "engine.$key" -- "$A" run tests/fixtures/golden.yaml --set engine.$key=-1 --out "$T/bad" --quiet
done
# tied sweep keys move together: one point per pair, the same rows as each pair run alone,
# written back as they were given; mismatched points are refused with their position
cat >"$T/tied.yaml" <<YAML
name: tied
model: {preset: olmoe-1b-7b, top_k: 8}
hardware: h200
workload: {blocks: 10, seed: 3, tree: {depth: 4, top_k: 6, nodes: 24}, acceptance: {tau: 3.0}}
policies: [natural]
sweep:
  [workload.tree.nodes, workload.acceptance.tau]: [[4, 2.0], [16, 2.5]]
  offload.policy: [lru, belady]
YAML
"$A" run "$T/tied.yaml" --out "$T/tied" --quiet >/dev/null 2>&1
"$A" run "$T/tied.yaml" --set workload.tree.nodes=16 --set workload.acceptance.tau=2.5 --set offload.policy=belady \
  --out "$T/tied1" --quiet >/dev/null 2>&1
if [ "$(($(wc -l <"$T/tied/summary.csv") - 1))" -eq 4 ] && grep -q '^3,16,2.5,belady,' "$T/tied/summary.csv" &&
   [ "$(grep '^3,' "$T/tied/summary.csv" | cut -d, -f5-)" = "$(tail -1 "$T/tied1/summary.csv" | cut -d, -f2-)" ] &&
   grep -q '^  \[workload.tree.nodes, workload.acceptance.tau\]: \[\[4, 2.0\], \[16, 2.5\]\]' "$T/tied/spec.resolved.yaml"; then ok
else bad "tied sweep keys: $(cut -d, -f1-5 "$T/tied/summary.csv" | tr '\n' ' ')"; fi
sed -i 's/\[16, 2.5\]\]/[16]]/' "$T/tied.yaml"
expect 2 "tied.yaml:7:[0-9]+: each point of tied sweep keys is a list of 2 scalars" -- "$A" run "$T/tied.yaml" --out "$T/bad" --quiet
# a verifier's selection_s: its own column, per pass, and nothing else moves
"$A" run tests/fixtures/golden.yaml --set 'policies=[acceptmoe, {verifier: acceptmoe, selection_s: 1e-3}]' \
  --out "$T/sel" --quiet >/dev/null 2>&1
if awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next} $c["policy"]!~/^acceptmoe/{next} {j=($c["policy"]=="acceptmoe")?0:1; q=$c["point"]; n++;
     t[q,j]=$c["time_per_token_s"]; s[q,j]=$c["selection_s_per_token"]; p[q,j]=$c["forward_passes"]; k[q,j]=$c["committed_tokens"]}
     END{if(n!=4) exit 1; for(q=0;q<2;q++){w=1e-3*p[q,1]/k[q,1]; d=t[q,1]-t[q,0]-w;
       if(s[q,0]!=0 || (s[q,1]-w)^2>1e-30 || d*d>1e-24) exit 1}}' "$T/sel/summary.csv"
then ok; else bad "selection_s is not charged once per pass in its own column: $(cut -d, -f1-4 "$T/sel/summary.csv")"; fi
expect 2 "selection_s" -- "$A" run tests/fixtures/golden.yaml --set 'policies=[{verifier: acceptmoe, selection_s: -1}]' \
  --out "$T/bad" --quiet
# ... and on 8 GPUs each layer's busiest group (layers.csv) averages to the summary's
"$A" run tests/fixtures/golden.yaml --set hardware.gpus=8 --set hardware.interconnect=nvlink4 --set parallel.attention_tp=8 \
  --set parallel.moe_ep=8 --set workload.blocks=20 --set 'policies=[natural, acceptmoe]' \
  --out "$T/ep" --quiet >/dev/null 2>&1
if awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next} {k=$1"/"$c["policy"]; b[k]+=$c["busiest_group_executed_mean"]; x[k]+=$c["executed_mean"]; n[k]++}
     END{for(p in b){if(!(b[p]>0 && b[p]<x[p]))exit 1; printf "%s %.17g\n", p, b[p]/n[p]}}' "$T/ep/layers.csv" | sort >"$T/ep.l" &&
   awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next} {print $1"/"$c["policy"], $c["busiest_group_executed_mean"]}' "$T/ep/summary.csv" | sort >"$T/ep.s" &&
   [ -s "$T/ep.l" ] && paste "$T/ep.l" "$T/ep.s" | awk '{d=$2-$4; if($1!=$3 || d*d > 1e-18*$4*$4)exit 1}'; then ok
else bad "layers.csv's busiest group does not average to the summary's: $(paste "$T/ep.l" "$T/ep.s" 2>&1)"; fi
# an old resolved spec's offload.host_overhead_per_layer_s is read as hardware.readback_s
expect 0 "readback_s: (7|6\\.9999)" -- bash -c "\"$A\" run tests/fixtures/golden.yaml --set workload.blocks=2 \
  --set offload.host_overhead_per_layer_s=7e-5 --out \"$T/alias\" --quiet >/dev/null && grep readback_s \"$T/alias/spec.resolved.yaml\""

# request drift off reproduces the workloads made before it existed, byte
# for byte: 40 blocks of Qwen3-30B-A3B with the routing its preset had then
# (sha256 of the .amt the earlier generator wrote); drift on changes them
old_routing=(--set model.routing.locality=0.9493 --set model.routing.locality_first=0.0001
  --set model.routing.locality_last=0.3093 --set model.routing.locality_peak=0.1489 --set model.routing.request_bias=2.2144
  --set model.routing.noise=0.7773 --set model.routing.tree_sibling=null --set model.routing.tree_repeat=null
  --set model.routing.skew=null
  --set model.routing.score_scale=null --set workload.blocks=40)
"$A" gen workloads/specs/quickstart.yaml "${old_routing[@]}" --set model.routing.drift_tokens=0 -o "$T/d0.amt" >/dev/null 2>&1
"$A" gen workloads/specs/quickstart.yaml "${old_routing[@]}" --set model.routing.drift_tokens=0 \
  --set model.routing.score_scale=1 -o "$T/d0s.amt" >/dev/null 2>&1
cmp -s "$T/d0.amt" "$T/d0s.amt" && ok || bad "score_scale 1 changes the workload"
"$A" gen workloads/specs/quickstart.yaml "${old_routing[@]}" --set model.routing.drift_tokens=32 -o "$T/d32.amt" >/dev/null 2>&1
if [ "$(sha256sum <"$T/d0.amt" | cut -c1-64)" = 377ed0a02cb4062b01d68d4c698d03fa137c75384e3814ac712c035a81ee28d0 ] &&
   [ -s "$T/d32.amt" ] && ! cmp -s "$T/d0.amt" "$T/d32.amt"; then ok
else bad "drift 0 no longer reproduces the earlier workload (or drift changes nothing)"; fi

# workload.routing.K and model.routing.K are one field: for every routing key
# of the resolved spec, an override set to the model's own value changes no
# byte of the workload, and another value changes it
"$A" run workloads/specs/quickstart.yaml --set workload.blocks=1 --set 'policies=[natural]' --out "$T/rk" --quiet \
  >/dev/null 2>&1
awk '/^model:/{m=1;next} /^[^ ]/{m=0} m&&/^  routing:/{r=1;next} m&&/^  [^ ]/{r=0} m&&r&&/^    [a-z_]+: /{
  k=$1; sub(":","",k); v=$0; sub(/^    [a-z_]+: /,"",v); print k "\t" v}' "$T/rk/spec.resolved.yaml" >"$T/rk.keys"
[ "$(wc -l <"$T/rk.keys")" -ge 12 ] && ok || bad "the resolved spec lists $(wc -l <"$T/rk.keys") model.routing keys"
"$A" gen workloads/specs/quickstart.yaml --set workload.blocks=6 -o "$T/rk0.amt" >/dev/null 2>&1
while IFS=$'\t' read -r k v; do
  "$A" gen workloads/specs/quickstart.yaml --set workload.blocks=6 --set "workload.routing.$k=$v" -o "$T/rk1.amt" \
    >/dev/null 2>&1
  cmp -s "$T/rk0.amt" "$T/rk1.amt" && ok || bad "workload.routing.$k=$v (the model's own value) changes the workload"
  case $k in locality_peak) w=0.9 ;; layer_correlation) w=0.2 ;; tree_sibling | tree_repeat) w=0.5 ;; *) w=0.37 ;; esac
  "$A" gen workloads/specs/quickstart.yaml --set workload.blocks=6 --set "workload.routing.$k=$w" -o "$T/rk2.amt" \
    >/dev/null 2>&1
  "$A" gen workloads/specs/quickstart.yaml --set workload.blocks=6 --set "model.routing.$k=$w" -o "$T/rk3.amt" \
    >/dev/null 2>&1
  if ! cmp -s "$T/rk0.amt" "$T/rk2.amt" && cmp -s "$T/rk2.amt" "$T/rk3.amt"; then ok
  else bad "workload.routing.$k=$w and model.routing.$k=$w do not make one new workload"; fi
done <"$T/rk.keys"
expect 2 "model.routing.score_scale lists 3 values; it takes one, or one per MoE layer \(48\)" -- \
  "$A" gen workloads/specs/quickstart.yaml --set 'model.routing.score_scale=[1, 2, 3]' -o "$T/rk4.amt"
expect 2 "workload.routing.skew must be a number, not 'x'" -- \
  "$A" gen workloads/specs/quickstart.yaml --set 'workload.routing.skew=[1, x]' -o "$T/rk4.amt"

# inspect's score shape against a hand-made capture with every expert's logit:
# Mixtral (8 experts, top-2), two tokens per layer, logits 3,1,0,... (entropy
# ln(e^3+e+6) - (3e^3+e)/(e^3+e+6) = 1.17417, top-2 mass 0.79169) and all 0
# (ln 8 = 2.07944, mass 0.25): every layer 1.62681, mass 0.52085
python3 - "$T/hand.jsonl" <<'PY' 2>/dev/null || printf '' >"$T/hand.jsonl"
import json, sys
with open(sys.argv[1], "w") as f:
    for t in range(2):
        for l in range(32):
            lg = [3, 1, 0, 0, 0, 0, 0, 0] if t == 0 else [0] * 8
            f.write(json.dumps({"problem_id": 0, "layer": l, "token_idx": t, "experts": [0, 1], "logits": lg}) + "\n")
PY
if [ -s "$T/hand.jsonl" ]; then
  expect 0 '"score_shape":\{"full_softmax":true,"entropy_mean":1\.6268[01],"topk_mass_mean":0\.52084[0-9],"entropy_by_layer":\[1\.627,' -- \
    "$A" inspect "$T/hand.jsonl" --format routing-jsonl --model mixtral-8x7b --window 2 --json
fi

# the registry of policies: every row, its description and parameters
expect 0 "mtp +a chain of N tokens" -- "$A" policies
expect 0 "budget: required \(e\.g\. 32\), 1\.\.1024 \(experts per layer\)" -- "$A" policies
expect 0 "interconnect \(" -- "$A" presets
# every long command stops on SIGINT or SIGTERM with exit 130 and writes nothing
for c in "fit workloads/specs/fit-olmoe.yaml --target workloads/targets/olmoe-1b-7b.yaml --blocks 300 -o $T/int-fit.yaml" \
         "calibrate workloads/specs/quickstart.yaml --set commitment.calibrate.blocks=200000 -o $T/int-cal.yaml" \
         "gen workloads/specs/quickstart.yaml --set workload.blocks=200000 -o $T/int-gen.amt" \
         "inspect workloads/specs/quickstart.yaml --set workload.blocks=100000"; do
  for sig in INT TERM; do
    # shellcheck disable=SC2086
    "$A" $c --quiet >/dev/null 2>"$T/int.err" &
    pid=$!; sleep 1; kill -$sig "$pid"; wait "$pid"; rc=$?
    if [ "$rc" = 130 ] && grep -q interrupted "$T/int.err" && ! ls "$T"/int-* >/dev/null 2>&1; then ok
    else bad "SIG$sig to ${c%% *}: exit $rc, $(cat "$T/int.err"), files: $(ls "$T"/int-* 2>/dev/null | tr '\n' ' ')"; fi
  done
done

fi
if want fit; then
# fit: recovers the routing of a workload it generated itself (OLMoE: 16
# layers, a profile 0.2 -> 0.7 at layer 6 -> 0.4, request_bias 1, noise 1,
# and with every logit stored, its score shape: 0.5 at every layer)
"$A" gen workloads/specs/fit-olmoe.yaml --set workload.blocks=300 --set workload.seed=5 \
  --set model.routing.locality_first=0.2 --set model.routing.locality=0.7 --set model.routing.locality_peak=0.4 \
  --set model.routing.locality_last=0.4 --set model.routing.request_bias=1 --set model.routing.noise=1 \
  --set model.routing.score_scale=0.5 --set workload.top_m=64 -o "$T/known.amt" >/dev/null 2>&1
if "$A" fit workloads/specs/fit-olmoe.yaml --trace "$T/known.amt" --blocks 300 -o "$T/fitted.yaml" --quiet >/dev/null 2>"$T/fit.err"; then
  awk '/^  locality:/{l=$2} /^  locality_first:/{f=$2} /^  locality_last:/{z=$2} /^  request_bias:/{b=$2} /^  noise:/{n=$2}
    /^  score_scale:/{sc=1} sc{e=index($0,"]"); gsub(/[][,]|score_scale:/," "); for(i=1;i<=NF;i++){ns++; if(($i-0.5)^2>0.0025)far++}; if(e)sc=0}
    END{exit !((l-0.7)^2<0.01 && (f-0.2)^2<0.01 && (z-0.4)^2<0.01 && (b-1)^2<0.09 && n==1 && ns==16 && !far)}' "$T/fitted.yaml" && ok ||
    bad "fit did not recover the known routing: $(grep -A9 '^routing:' "$T/fitted.yaml" | tr '\n' ' ')"
else
  bad "fit --trace failed: $(cat "$T/fit.err")"
fi
fi
if want fit-drift; then
# ... and a drifting request bias (request_bias 2, drift_tokens 24), from the
# trace's reuse distance as from its other statistics
"$A" gen workloads/specs/fit-olmoe.yaml --set workload.blocks=150 --set workload.seed=5 \
  --set model.routing.locality_first=0.2 --set model.routing.locality=0.7 --set model.routing.locality_peak=0.4 \
  --set model.routing.locality_last=0.4 --set model.routing.request_bias=2 --set model.routing.noise=1 \
  --set model.routing.drift_tokens=24 -o "$T/drift.amt" >/dev/null 2>&1
if "$A" fit workloads/specs/fit-olmoe.yaml --trace "$T/drift.amt" --blocks 150 -o "$T/fitted-drift.yaml" --quiet >/dev/null 2>"$T/fit.err"; then
  awk '/^  request_bias:/{b=$2} /^  drift_tokens:/{d=$2} END{exit !((b-2)^2<0.09 && d>=12 && d<=48)}' "$T/fitted-drift.yaml" && ok ||
    bad "fit did not recover the drift: $(grep -A9 '^routing:' "$T/fitted-drift.yaml" | tr '\n' ' ')"
else
  bad "fit --trace (drift) failed: $(cat "$T/fit.err")"
fi
fi
if want fit-tree; then
printf 'adjacent_overlap: 0.4\nlocalty: 3\n' >"$T/bad-targets.yaml"
expect 2 "bad-targets.yaml:2:1: unknown key 'localty'" -- "$A" fit workloads/specs/fit-olmoe.yaml --target "$T/bad-targets.yaml"
expect 2 "one of --target" -- "$A" fit workloads/specs/fit-olmoe.yaml
printf 'tree_union_layers: [40, 41]\ntree_nodes: 32\n' >"$T/tree-few.yaml"
expect 2 "tree_union_layers need one value per MoE layer \(16\), not 2" -- \
  "$A" fit workloads/specs/fit-olmoe.yaml --target "$T/tree-few.yaml"
# ... and a tree's own concentration (docs/generator.md), from the union
# per layer of 32-node OLMoE trees (locality 0.3, noise 0.5) generated on
# another seed: nodes repeating their twins with probability 0.5 and no
# sibling share; then every node repeating and siblings sharing 0.6
tr=(--set workload.tree.nodes=32 --set workload.tree.depth=6 --set workload.tree.top_k=10 --set model.routing.locality=0.3
  --set model.routing.locality_first=0.3 --set model.routing.locality_last=0.3 --set model.routing.noise=0.5)
for known in "0.5 0 0.4 0.6 0 0.08" "1 0.6 0.95 1.01 0.5 0.7"; do
  read -r rep sib rlo rhi slo shi <<<"$known"
  "$A" inspect workloads/specs/fit-olmoe.yaml "${tr[@]}" --set workload.blocks=300 --set workload.seed=5 \
    --set model.routing.tree_repeat="$rep" --set model.routing.tree_sibling="$sib" --json 2>/dev/null |
    python3 -c 'import json, sys; u = json.load(sys.stdin)["passes"]["union_by_layer"]
print("tree_union_layers: [%s]\ntree_nodes: 32\ntree_depth: 6\ntree_top_k: 10\ntree_tau: 4.4" % ", ".join("%.3f" % x for x in u))' \
    >"$T/tree-targets.yaml"
  if "$A" fit workloads/specs/fit-olmoe.yaml "${tr[@]}" --target "$T/tree-targets.yaml" -o "$T/fitted-tree.yaml" --quiet \
    >/dev/null 2>"$T/fit.err"; then
    awk -v rlo="$rlo" -v rhi="$rhi" -v slo="$slo" -v shi="$shi" '
      function mean(s,   n, a, i, m) { gsub(/[][,]|[a-z_]+:/, " ", s); n = split(s, a, " "); for (i = 1; i <= n; i++) m += a[i]; return n ? m / n : 0 }
      /^  tree_repeat:/ { r = 1 } /^  tree_sibling:/ { q = 1 }
      r { rs = rs " " $0; if (index($0, "]") || !index(rs, "[")) r = 0 } q { qs = qs " " $0; if (index($0, "]") || !index(qs, "[")) q = 0 }
      END { mr = mean(rs); ms = mean(qs); exit !(mr >= rlo && mr <= rhi && ms >= slo && ms <= shi) }' "$T/fitted-tree.yaml" && ok ||
      bad "fit did not recover the tree (repeat $rep, sibling $sib): $(grep -A3 '^  tree_' "$T/fitted-tree.yaml" | tr '\n' ' ')"
  else
    bad "fit (tree) failed: $(cat "$T/fit.err")"
  fi
done
fi
if want core; then
# inspect's pass statistics on a hand-made two-pass request (Mixtral: top-2
# of 8, every layer alike): pass 0 a 9-token chain, all accepted, each token
# on {0, 1}; pass 1 a root on {0, 1} with children on {2, 3} (accepted) and
# {1, 4}. Unions 2 and 5: mean 3.5, p90 and p99 5; accepted paths' 2 and 4:
# 3; pass 1's novelty against the 8 tokens before it, which used {0, 1}:
# {2, 3, 4} of 5 = 0.6 (pass 0 has no 8 tokens before it); the top-4 (half
# of 8 experts) by router mass and by utility are {0, 1, 2, 3} in both
# passes (pass 1: expert 1 leads, 3 and 4 tie and the lower id wins): 1
python3 - "$T/two.jsonl" <<'PY'
import json, sys
L = 32
def blk(step, parent, acc, sets):
    return {"request": 0, "step": step, "parent": parent, "logp": [0.0] * len(parent), "accepted": acc,
            "topk": [[[[a, 1.0], [b, 0.5]] for a, b in sets] for _ in range(L)]}
with open(sys.argv[1], "w") as f:
    f.write(json.dumps(blk(0, [-1] + list(range(8)), [1] * 9, [(0, 1)] * 9)) + "\n")
    f.write(json.dumps(blk(1, [-1, 0, 0], [1, 1, 0], [(0, 1), (2, 3), (1, 4)])) + "\n")
PY
expect 0 '"block_top32_overlap":1,"block_top32_utility_overlap":1,"passes":\{"path_union_mean":3,"novelty_w8":0\.6,"union_by_layer":\[3\.5,3\.5,.*"union_p90_by_layer":\[5,5,.*"union_p99_by_layer":\[5,' -- \
  "$A" inspect "$T/two.jsonl" --format blocks-jsonl --model mixtral-8x7b --json
# SGLang's expert-activation tracker (per-pass trees) to tree blocks-jsonl:
# a hand-made capture whose trees are scattered over the token order, with
# physical ids through a map with replicas, converts to the blocks it stands
# for, byte for byte; inspect reads them and a run replays them; a batch of
# two rows, and physical ids without the map, are refused and leave no file
python3 tests/sglang_tree_capture.py "$T/stc.json" "$T/stmap.json" "$T/st_truth.jsonl"
python3 scripts/capture/sglang_tree.py "$T/stc.json" "$T/st.jsonl" --experts 64 --physical-to-logical "$T/stmap.json" \
  2>"$T/st.err"
[ -s "$T/st.jsonl" ] && cmp -s "$T/st.jsonl" "$T/st_truth.jsonl" && ok || bad "sglang tree conversion: $(cat "$T/st.err")"
expect 0 '"blocks":3,"requests":2,"committed_tokens":7' -- \
  "$A" inspect "$T/st.jsonl" --format blocks-jsonl --model olmoe-1b-7b --json
"$A" run workloads/specs/fit-olmoe.yaml --set workload.source=blocks-jsonl --set "workload.path=$T/st.jsonl" \
  --set workload.blocks=0 --out "$T/strun" --quiet >/dev/null 2>"$T/st.err" &&
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["policy"] == "natural" { b = $c["blocks"] } END { exit b != 3 }' \
    "$T/strun/summary.csv" && ok || bad "a run does not replay the converted trees: $(cat "$T/st.err")"
expect 2 "token 2: expert ids \[18, 55, .*\] \(need 8 in 0\.\.63\)" -- \
  python3 scripts/capture/sglang_tree.py "$T/stc.json" "$T/st2.jsonl" --experts 64
python3 tests/sglang_tree_capture.py "$T/stc2.json" "$T/stmap.json" "$T/st_truth2.jsonl" --batch2
expect 2 "sample 0, pass 0: retrive_next_token has 2 rows: a batch of several requests" -- \
  python3 scripts/capture/sglang_tree.py "$T/stc2.json" "$T/st3.jsonl" --experts 64 --physical-to-logical "$T/stmap.json"
[ ! -e "$T/st2.jsonl" ] && [ ! -e "$T/st3.jsonl" ] && [ ! -e "$T/st3.jsonl.tmp" ] && ok || bad "a refused capture left a file"

# marginal (§6): a row with its share; the oracle under MIN bounds the lossless verifier (natural) of the same
# draft under every cache policy: no more fetches, no less speed
mg=(--set workload.blocks=60 --quiet)
printf 'name: mg\nmodel: {preset: olmoe-1b-7b, top_k: 8}\nhardware: h200\nworkload: {blocks: 60, seed: 3, tree: {depth: 4, top_k: 6, nodes: 24}, acceptance: {tau: 3.0}}\ncommitment: {calibrate: {blocks: 50, seed: 4}}\noffload: {slots_per_layer: 24, policy: lru}\npolicies:\n  - {verifier: oracle}\n  - {verifier: marginal, share: 0.7}\n  - marginal-depth\nsweep: {offload.policy: [lru, lfu, belady, min]}\n' >"$T/mg.yaml"
if "$A" run "$T/mg.yaml" "${mg[@]}" --out "$T/mg" >/dev/null 2>&1 &&
   awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
     $c["policy"]=="natural"{nt[$c["offload.policy"]]=$c["tokens_per_s"]; nh[$c["offload.policy"]]=$c["h2d_bytes_per_token"]}
     $c["policy"]=="oracle"&&$c["offload.policy"]=="min"{ot=$c["tokens_per_s"]; oh=$c["h2d_bytes_per_token"]}
     $c["policy"]~/^marginal\/share=0.7$|^marginal-depth$/{m++}
     END{if(m!=8||!(ot>0))exit 1; for(p in nt)if(nt[p]>ot||nh[p]<oh)exit 1}' "$T/mg/summary.csv"; then ok
else bad "marginal rows, or the oracle under MIN as a bound of natural: $(head -c 300 "$T/mg/summary.csv")"; fi
printf 'name: x\nmodel: qwen3-30b-a3b\nhardware: h200\nworkload: {blocks: 10}\npolicies:\n  - {verifier: marginal, share: 1.5}\n' >"$T/share0.yaml"
expect 2 "share0.yaml:6:33: share = 1.5 is out of range 0..1" -- "$A" run "$T/share0.yaml" --out "$T/share0"
# a zero deviation budget (share 0) is natural routing, exactly: nothing displaced, the same experts and tokens
printf 'name: x\nmodel: qwen3-30b-a3b\nhardware: h200\nworkload: {blocks: 40, seed: 5}\ncommitment: {calibrate: {blocks: 40, seed: 6}}\npolicies:\n  - natural\n  - {verifier: marginal, share: 0}\n' >"$T/share0.yaml"
if "$A" run "$T/share0.yaml" --quiet --out "$T/share0" >/dev/null 2>&1 &&
   awk -F, 'NR==1{for(i=1;i<=NF;i++)c[$i]=i;next}
     {k=$c["committed_tokens"] "," $c["union_mean"] "," $c["executed_mean"] "," $c["hbm_expert_bytes_per_token"]; r[$c["policy"]]=k
      if($c["policy"]!="natural"){d=$c["displaced_assignment_rate"]+$c["deviated_token_rate"]+$c["predicted_deviated_token_rate"]; b=$c["acceptmoe_predicted_deviated_token_rate"]}}
     END{exit !(r["natural"]!="" && r["natural"]==r["marginal/share=0"] && d==0 && b>0)}' "$T/share0/summary.csv"; then ok
else bad "marginal at share 0 is not natural routing: $(cut -c1-300 "$T/share0/summary.csv")"; fi
# marginal reads m̄_d beside p̂: calibrate writes both; a table without mass is refused, naming the fix
"$A" calibrate "$T/mg.yaml" -o "$T/cal.yaml" >/dev/null 2>&1
sed -e "s|^commitment:.*|commitment: {file: $T/cal.yaml}|" -e 's|^sweep:.*||' "$T/mg.yaml" >"$T/mgf.yaml"
sed -e 's|^commitment:.*|commitment: {table: [1, 0.8, 0.5]}|' "$T/mgf.yaml" >"$T/mgt.yaml"
if grep -q '^mass: \[1.000000, 0\.[0-9]' "$T/cal.yaml" && "$A" run "$T/mgf.yaml" --quiet --out "$T/mgf" >/dev/null 2>&1 &&
   [ -s "$T/mgf/summary.csv" ]; then ok; else bad "calibrate writes no mass, or a file with it does not run marginal"; fi
expect 2 "verifier marginal needs the draft mass per depth .*commitment.mass beside commitment.table" -- \
  "$A" run "$T/mgt.yaml" --out "$T/mgt"

# batches (§17): a sweep over workload.batch gains the batch columns, its
# batch-1 point is the plain run's, a trace's slots seek to the blocks the
# generator's slots make, the same spec gives the same bytes, and what a
# batch cannot do is refused by name
printf 'name: tb\nmodel: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 16, top_k: 2, hidden: 64, moe_intermediate: 32, vocab: 1000}\nhardware: h200\nworkload: {blocks: 40, tokens_per_request: 6, tree: {depth: 3, top_k: 4, nodes: 12}, acceptance: {tau: 2.0}}\npolicies: [natural, acceptmoe, acceptmoe-pass, {draft: autoregressive}, {draft: evict}, {draft: mtp, tokens: 3}]\nsweep: {workload.batch: [1, 4]}\n' >"$T/tb.yaml"
"$A" run "$T/tb.yaml" --quiet --out "$T/tb" >/dev/null 2>"$T/tb.err"
"$A" run "$T/tb.yaml" --quiet --out "$T/tb2" >/dev/null 2>&1
bcols='NR==1{for(i=1;i<=NF;i++)c[$i]=i; if(!("speedup_vs_autoregressive" in c)||!("tpot_p90_s" in c))exit 1; next}
  $c["workload.batch"]==4&&$c["policy"]=="natural"{if(!($c["batch_occupancy_mean"]>1&&$c["requests"]>3))exit 1; n++}
  $c["workload.batch"]==4&&$c["policy"]=="autoregressive"{if($c["speedup_vs_autoregressive"]!=1)exit 1; n++}
  $c["policy"]~/^(natural|acceptmoe|autoregressive|mtp\/N=3)$/{t[$c["policy"],$c["workload.batch"]]=$c["committed_tokens"]}
  END{for(k in t){split(k,q,SUBSEP); if(t[q[1],1]!=t[q[1],4])exit 1; m++} exit n!=2||m!=8}'
if [ -s "$T/tb/summary.csv" ] && awk -F, "$bcols" "$T/tb/summary.csv" && cmp -s "$T/tb/summary.csv" "$T/tb2/summary.csv" &&
   cmp -s "$T/tb/layers.csv" "$T/tb2/layers.csv"; then ok
else bad "batch sweep: columns, occupancy, tokens per row or determinism: $(cat "$T/tb.err") $(head -c 400 "$T/tb/summary.csv")"; fi
# its batch-1 point is the plain run's, and a plain spec resolves without the batch keys
sed 's|^sweep:.*||' "$T/tb.yaml" >"$T/tb1.yaml"
"$A" run "$T/tb1.yaml" --quiet --out "$T/tb1" >/dev/null 2>&1
pick='NR==1{for(i=1;i<=NF;i++)c[$i]=i;next} (!("workload.batch" in c)||$c["workload.batch"]==1){print $c["policy"],$c["tokens_per_s"],$c["union_mean"],$c["committed_tokens"]}'
if cmp -s <(awk -F, "$pick" "$T/tb/summary.csv") <(awk -F, "$pick" "$T/tb1/summary.csv") &&
   ! grep -q 'batch:' "$T/tb1/spec.resolved.yaml" && grep -q 'workload.batch: \[1, 4\]' "$T/tb/spec.resolved.yaml"; then ok
else bad "batch 1 in a sweep differs from the plain run, or the resolved specs' batch keys are wrong"; fi
# a trace's slots give what the generator's give
sed -e 's|^sweep:.*||' -e 's|workload: {blocks: 40,|workload: {batch: 4, blocks: 40,|' "$T/tb.yaml" >"$T/tb4.yaml"
"$A" gen "$T/tb4.yaml" -o "$T/tb4.amt" --quiet >/dev/null 2>&1
tc=(--set 'commitment.table=[1, 0.8, 0.6, 0.4, 0.2]' --set 'policies=[natural, acceptmoe, acceptmoe-pass, autoregressive]')
"$A" run "$T/tb4.yaml" "${tc[@]}" --quiet --out "$T/tb4g" >/dev/null 2>&1
"$A" run "$T/tb4.yaml" "${tc[@]}" --set workload.source=trace --set "workload.path=$T/tb4.amt" --quiet --out "$T/tb4t" \
  >/dev/null 2>&1
if [ -s "$T/tb4t/summary.csv" ] && cmp -s "$T/tb4g/summary.csv" "$T/tb4t/summary.csv" && cmp -s "$T/tb4g/layers.csv" "$T/tb4t/layers.csv"; then ok
else bad "batch 4: a trace's slots and the generator's differ"; fi
# the slots advance on the generator's threads: the same bytes on any count
"$A" run "$T/tb4.yaml" --threads 1 --quiet --out "$T/th1" >/dev/null 2>&1
"$A" run "$T/tb4.yaml" --threads 3 --quiet --out "$T/th3" >/dev/null 2>&1
cmp -s "$T/th1/summary.csv" "$T/th3/summary.csv" && cmp -s "$T/th1/layers.csv" "$T/th3/layers.csv" && ok ||
  bad "batch 4: --threads 1 and 3 differ"
expect 2 "output.blocks_csv: blocks.csv is not written at workload.batch > 1" -- "$A" run "$T/tb4.yaml" --blocks-csv \
  --out "$T/bad" --quiet
expect 2 "workload.batch: 4 needs workload.source synthetic or trace" -- "$A" run "$T/tb4.yaml" \
  --set workload.source=routing-jsonl --set workload.path=tests/fixtures/capture/decode.jsonl --out "$T/bad" --quiet
expect 2 "--backend: the backends execute one block's pass; workload.batch is 4" -- "$A" run "$T/tb4.yaml" \
  --backend cpu --out "$T/bad" --quiet
expect 2 "fit_batch.py: .*/nowhere/batch/decode_vs_batch.csv not found" -- python3 scripts/fit_batch.py "$T/nowhere"
expect 2 "workload.prefill_schedule must be one of separate, chunked" -- "$A" run "$T/tb4.yaml" --set workload.prefill_schedule=interleaved \
  --out "$T/bad" --quiet

# load (§18): a sweep over the arrival rate gains the latency columns and
# requests.csv, the same bytes on any thread count and run after run; the
# closed process spelled out is the batch byte for byte; costtable writes
# its JSON; the new keys' errors name them
printf 'name: tl\nmodel: {name: tiny-moe, layers: 2, moe_layers: 2, experts: 16, top_k: 2, hidden: 64, moe_intermediate: 32, vocab: 1000}\nhardware: h200\nworkload: {tokens_per_request: 8, prompt_tokens: 16, requests: 10, max_running: 4, arrival: {process: gamma, rate: 40, cv: 2, range_ratio: 0.5}, tree: {depth: 3, top_k: 4, nodes: 12}, acceptance: {tau: 2.0}}\nslo: {ttft_s: 0.01, tpot_s: 0.002}\noutput: {requests_csv: true}\npolicies: [natural, autoregressive, {draft: adaptive, cost: experts}]\nsweep: {workload.arrival.rate: [40, 400]}\n' >"$T/tl.yaml"
"$A" run "$T/tl.yaml" --quiet --threads 1 --out "$T/tl1" >/dev/null 2>"$T/tl.err"
"$A" run "$T/tl.yaml" --quiet --threads 3 --out "$T/tl3" >/dev/null 2>&1
lcols='NR==1{for(i=1;i<=NF;i++)c[$i]=i; if(!("ttft_p99_s" in c)||!("goodput" in c)||!("e2e_p50_s" in c))exit 1; next}
  {if($c["requests"]!=10||$c["ttft_p50_s"]<=0||$c["e2e_p99_s"]<$c["e2e_p50_s"]||$c["slo_attainment"]>1)exit 1; n++} END{exit n!=6}'
if [ -s "$T/tl1/summary.csv" ] && awk -F, "$lcols" "$T/tl1/summary.csv" && [ "$(($(wc -l <"$T/tl1/requests.csv") - 1))" -eq 60 ] &&
   cmp -s "$T/tl1/summary.csv" "$T/tl3/summary.csv" && cmp -s "$T/tl1/requests.csv" "$T/tl3/requests.csv" &&
   grep -q 'process: gamma' "$T/tl1/spec.resolved.yaml" && grep -q 'cost: experts' "$T/tl1/spec.resolved.yaml"; then ok
else bad "open arrivals: columns, requests.csv, determinism or the resolved spec: $(cat "$T/tl.err") $(head -c 300 "$T/tl1/summary.csv")"; fi
# the resolved spec runs again to the same bytes
"$A" run "$T/tl1/spec.resolved.yaml" --quiet --out "$T/tlr" >/dev/null 2>&1
cmp -s "$T/tl1/summary.csv" "$T/tlr/summary.csv" && ok || bad "open arrivals: the resolved spec gives other results"
# closed, spelled out: the batch's bytes (and no load keys in the resolved spec)
"$A" run "$T/tb4.yaml" --quiet --out "$T/tc0" >/dev/null 2>&1
"$A" run "$T/tb4.yaml" --set workload.arrival.process=closed --quiet --out "$T/tc1" >/dev/null 2>&1
if [ -s "$T/tc0/summary.csv" ] && cmp -s "$T/tc0/summary.csv" "$T/tc1/summary.csv" && cmp -s "$T/tc0/layers.csv" "$T/tc1/layers.csv" &&
   ! grep -q 'arrival' "$T/tc1/spec.resolved.yaml"; then ok
else bad "closed arrivals differ from the batch"; fi
"$A" costtable "$T/tl.yaml" -o "$T/ct.json" --quiet 2>"$T/ct.err"
if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['batch'][0]==1 and d['batch'][-1]==4 and d['tokens_per_request'][-1]==12; assert len(d['step_s'])==len(d['batch']) and all(len(r)==len(d['tokens_per_request']) for r in d['step_s']); assert len(d['by_total_tokens'])==len(d['batch'])*len(d['tokens_per_request']); assert all(r[j]<r[j+1] for r in d['step_s'] for j in range(len(r)-1))" "$T/ct.json"; then ok
else bad "costtable: $(cat "$T/ct.err") $(head -c 300 "$T/ct.json")"; fi
expect 2 "--backend: the backends execute one block's pass; workload.arrival.process is gamma" -- "$A" run "$T/tl.yaml" \
  --backend cpu --out "$T/bad" --quiet
expect 2 "cost must be one of tokens, experts, not 'flops'" -- "$A" run "$T/tl.yaml" \
  --set 'policies=[{draft: adaptive, cost: flops}]' --out "$T/bad" --quiet
expect 2 "workload.arrival.process: gamma needs workload.source synthetic" -- "$A" run "$T/tl.yaml" \
  --set workload.source=routing-jsonl --set workload.path=tests/fixtures/capture/decode.jsonl --out "$T/bad" --quiet
expect 2 "offload.policy: belady reads the future" -- "$A" run "$T/tl.yaml" --set offload.slots_per_layer=8 \
  --set offload.policy=belady --out "$T/bad" --quiet
printf 'arrival_s,prompt_tokens,output_tokens\n0.1,8,4\n0.05,8,4\n' >"$T/arr.csv"
expect 2 "arr.csv:3:1 \\(byte 46\\): arrival_s 0.05 comes before" -- "$A" run "$T/tl.yaml" --set workload.arrival.process=trace \
  --set workload.arrival.cv=1 --set workload.arrival.range_ratio=0 --set "workload.arrival.path=$T/arr.csv" --out "$T/bad" --quiet

# serving cells (§19): a hand file runs its deployments (plain, EAGLE-3, DSpark fixed
# and adaptive, MTP on a dense target), pairs speculation
# on with off, lists the rows it cannot run with their reasons, writes
# --csv (one line per row) and names a bad file's positions
"$A" cells tests/fixtures/cells.csv --csv "$T/cells.csv" --quiet >"$T/cells.md" 2>"$T/cells.err"
if grep -qE '^\| on \| off \| output_tok_s \| 1\.042 \| [0-9.]+ \|' "$T/cells.md" &&
   grep -q "skipped: no model preset 'no-such-model'" "$T/cells.md" && grep -q "skipped: lengths 'lmsys': no stand-in" "$T/cells.md" &&
   grep -q "^| dataset | .* ok, prompts 161 tokens, ShareGPT's mean" "$T/cells.md" &&
   grep -q "^| curve | .* ok, al from qwen3-32b-0101's thinking_on curve" "$T/cells.md" &&
   grep -q "the run failed: --set engine.nonsense=1: unknown key" "$T/cells.md" &&
   grep -qE '^\| offc8 \| 8 \| 8 \| 1\.000 \|$' "$T/cells.md" && grep -qE '^\| mtp \| 8 \| 7\.[0-9]+ \| 0\.9[0-9]+ \|$' "$T/cells.md" &&
   [ "$(wc -l <"$T/cells.csv")" -eq 15 ] && [ "$(grep -c ',ok$' "$T/cells.csv")" -eq 11 ] &&
   awk -F, '$1 == "off-ttft" && $2 > 0 && $5 == "ok" { f = 1 } END { exit !f }' "$T/cells.csv" &&
   head -1 "$T/cells.csv" | grep -qx 'id,predicted,measured,error,status'; then ok
else bad "cells: $(cat "$T/cells.err") $(head -c 600 "$T/cells.md")"; fi
"$A" cells tests/fixtures/cells.csv --only on,off --quiet >"$T/cells2.md" 2>&1
grep -q '^| on | off |' "$T/cells2.md" && ! grep -q 'capture' "$T/cells2.md" && ok || bad "cells --only: $(head -c 300 "$T/cells2.md")"
sed 's/^on,hand,T,qwen3-32b,h200,2,/on,hand,T,qwen3-32b,h200,0,/' tests/fixtures/cells.csv >"$T/badcells.csv"
expect 2 "badcells.csv:3:26 \\(byte 230\\): gpus must be a whole number" -- "$A" cells "$T/badcells.csv" --quiet
# tier rows (§21): the host, link and experts columns after value, the metrics decode_tok_s,
# prefill_tok_s and cache_hit_rate (a GPU cache over host memory: offload's); the host computing every
# expert is slower than the GPU; bad tier values are refused at file:line:column
"$A" cells tests/fixtures/cells_tiers.csv --csv "$T/ct.csv" --quiet >"$T/ct.md" 2>&1
if awk -F, '$1 == "t-gpu" && $5 == "ok" { g = $2 } $1 == "t-cpu" && $5 == "ok" { c = $2 } $1 == "t-half" && $5 == "ok" { h = $2 }
     $1 == "t-cache" && $5 == "ok" { r = $2 } END { exit !(g > c && c > 0 && h > 0 && r > 0 && r <= 1) }' "$T/ct.csv"; then ok
else bad "cells tier rows: $(head -c 600 "$T/ct.md")"; fi
sed 's/xeon-6454s\*2/xeon-9999/' tests/fixtures/cells_tiers.csv >"$T/ct1.csv"
expect 2 "ct1.csv:3:100 \(byte 368\): host must be a host preset of workloads/hosts/" -- "$A" cells "$T/ct1.csv" --quiet
sed 's/cpu:0.5:front/cpu:1.5:front/' tests/fixtures/cells_tiers.csv >"$T/ct2.csv"
expect 2 "ct2.csv:4:[0-9]+ \(byte [0-9]+\): experts: 'cpu:1.5:front': cpu:SHARE:STRATEGY takes the GPU's share from 0 to 1" -- "$A" cells "$T/ct2.csv" --quiet
sed 's/cpu:0.5:front/cpu:0.5:hottest/' tests/fixtures/cells_tiers.csv >"$T/ct3.csv"
expect 2 "ct3.csv:4:[0-9]+ .*no strategy 'hottest'" -- "$A" cells "$T/ct3.csv" --quiet
sed 's/cache:16:lru/cache:65:lru/' tests/fixtures/cells_tiers.csv >"$T/ct4.csv"
expect 2 "ct4.csv:5:[0-9]+ .*65 slots a layer, more than olmoe-1b-7b's 64 experts" -- "$A" cells "$T/ct4.csv" --quiet
sed 's/,pcie5,/,pcie9,/' tests/fixtures/cells_tiers.csv >"$T/ct5.csv"
expect 2 "ct5.csv:4:[0-9]+ .*link must be pcie4 or pcie5" -- "$A" cells "$T/ct5.csv" --quiet
if [ -f "$REAL/serving/cells.csv" ]; then
  expect 0 'dsv4-mi350x-off-c4 .* skipped: the layout is not stated' -- "$A" cells "$REAL/serving/cells.csv" --only dsv4-mi350x-off-c4,qwen3-32b-h200-off-q1 --quiet
fi

# calibrated deployments (§20): fit --cells fits each deployment to its
# speculation-off rows alone, so poisoning every speculation row (its
# measurement, its acceptance length) writes the same bytes; a spec names the
# preset as its first key; cells --calibrated reports both ways
mkdir -p "$T/fa" "$T/fb"
cp tests/fixtures/cells.csv tests/fixtures/acceptance_curves.csv "$T/fa/"
cp tests/fixtures/acceptance_curves.csv "$T/fb/"
awk -F, 'NR > 1 && $11 != "none" { $NF = $NF * 10 + 7; if ($13 != "") $13 = 1.01 } { print }' OFS=, \
  tests/fixtures/cells.csv >"$T/fb/cells.csv"
(cd "$T/fa" && "$A" fit --cells cells.csv -o dep --quiet >fit.md 2>fit.err)
(cd "$T/fb" && "$A" fit --cells cells.csv -o dep --quiet >fit.md 2>fit.err)
D1="$T/fa/dep/qwen3-32b-h200-2x-tp2-ep1-vllm-bf16.yaml"
if [ -f "$D1" ] && ! cmp -s "$T/fa/cells.csv" "$T/fb/cells.csv" &&
   [ "$(ls "$T/fa/dep" | wc -l)" -eq 2 ] && cmp -s "$T/fa/fit.md" "$T/fb/fit.md" && diff -r "$T/fa/dep" "$T/fb/dep" >/dev/null &&
   grep -q '^# of cells.csv: off off-tpot dataset offc8 off-ttft$' "$D1" &&
   grep -qE '^engine: \{preset: vllm, request_s: [0-9.e-]+, efficiency: [0-9.]+\}$' "$D1" &&
   grep -qE '^engine: \{preset: vllm, graph_capture_max_tokens: 64, request_s' "$T/fa/dep/"*-ebf94cce.yaml &&
   grep -qE '^\| qwen3-32b-h200-2x-tp2-ep1-vllm-bf16 \| 5 \| 0.0002 -> ' "$T/fa/fit.md"; then ok
else bad "fit --cells: $(cat "$T/fa/fit.err" "$T/fa/fit.md") $(diff -r "$T/fa/dep" "$T/fb/dep")"; fi
eff=$(sed -n 's/^engine: .*efficiency: \([0-9.]*\)}$/\1/p' "$D1")
printf 'deployment: %s\nname: d\nworkload: {tokens_per_request: 8, blocks: 20}\n' "$D1" >"$T/dep.yaml"
if [ -n "$eff" ] && "$A" run "$T/dep.yaml" --out "$T/deprun" --quiet >/dev/null &&
   awk -v e="$eff" '/^  efficiency: / { f = ($2 - e) * ($2 - e) < 1e-20 } END { exit !f }' "$T/deprun/spec.resolved.yaml" &&
   grep -q '^  moe_ep: 1$' "$T/deprun/spec.resolved.yaml" && grep -q '^  name: "qwen3-32b"$' "$T/deprun/spec.resolved.yaml"; then ok
else bad "a spec naming a deployment: efficiency $eff not in $T/deprun/spec.resolved.yaml"; fi
printf 'name: d\ndeployment: %s\n' "$D1" >"$T/dep-late.yaml"
expect 2 "dep-late.yaml:2:13: deployment must be a spec's first key" -- "$A" run "$T/dep-late.yaml" --out "$T/bad" --quiet
printf 'deployment: nowhere-at-all\n' >"$T/dep-none.yaml"
expect 2 "unknown deployment 'nowhere-at-all'" -- "$A" run "$T/dep-none.yaml" --out "$T/bad" --quiet
{ cat "$D1"; printf 'workload: {blocks: 5}\n'; } >"$T/dep-wl.yaml"
printf 'deployment: %s\n' "$T/dep-wl.yaml" >"$T/dep-wl-spec.yaml"
expect 2 "dep-wl.yaml:11:1: a deployment sets model, hardware, parallel and engine only, not 'workload'" -- \
  "$A" run "$T/dep-wl-spec.yaml" --out "$T/bad" --quiet
"$A" cells tests/fixtures/cells.csv --calibrated --csv "$T/calcells.csv" --quiet >"$T/cal.md" 2>"$T/cal.err"
if grep -q '^Calibrated deployments' "$T/cal.md" && grep -qE '^\| on \| off \| output_tok_s \| 1\.042 \| 1\.044 \| [0-9.]+ \|' "$T/cal.md" &&
   grep -qE '^Ratio MAPE: [0-9.]+% with the presets, [0-9.]+% calibrated, over 5 pairs$' "$T/cal.md" &&
   grep -qE '^\| on \| output_tok_s \| 125 \| 129\.[0-9] \| [0-9.]+ \| \+3\.[0-9]% \| [-+][0-9.]+% \| no \|$' "$T/cal.md" &&
   head -1 "$T/calcells.csv" | grep -qx 'id,predicted,measured,error,status,calibrated,calibrated_error' &&
   cmp -s <(sed '/^$/q' "$T/cal.md") <(sed '/^$/q' "$T/cells.md"); then ok
else bad "cells --calibrated: $(cat "$T/cal.err") $(tail -c 1500 "$T/cal.md")"; fi
expect 2 "fit --cells takes no spec" -- "$A" fit --cells tests/fixtures/cells.csv tests/fixtures/golden.yaml

# real data, when the shared folder is there
if [ -f "$REAL/mixtral-8x7b-routing/gsm8k_routing.jsonl" ]; then
  expect 0 '"2":3.31[01][0-9]*,"4":4.97[89]' -- "$A" inspect "$REAL/mixtral-8x7b-routing/gsm8k_routing.jsonl" \
    --format routing-jsonl --model mixtral-8x7b --window 8 --json
else
  echo "real data absent: skipped the Mixtral import check"
fi
if [ -f "$REAL/spec-bench/vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl" ]; then
  expect 0 'tau 3\.' -- "$A" inspect tests/fixtures/golden.yaml --set workload.blocks=400 \
    --set "workload.acceptance.replay=$REAL/spec-bench/vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl"
fi
# the speculative cycle's fit through the simulator: every fitted row within 10% (docs/validation.md)
if [ -f "$REAL/costs/spec_cycle.csv" ]; then
  expect 0 'worst miss over the fitted rows: [0-9]\.[0-9]%' -- python3 scripts/fit_spec_cycle.py --sim "$A" "$REAL"
else
  echo "real data absent: skipped the cycle fit"
fi
expect 2 "fit_spec_cycle: .*/nowhere/costs/spec_cycle.csv not found" -- python3 scripts/fit_spec_cycle.py --sim "$A" "$T/nowhere"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
