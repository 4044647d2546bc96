#!/bin/sh
# In-process pairs on the fake stack, as the GPU scripts' pairs: bench_cpu
# with BENCH_PAIRS (observed over paused, medians of the pairs), for two
# builds of the shim side by side, learning on and off, alternating, ROUNDS
# processes of each.
# usage: bench_pairs.sh BENCH_BINARY FAKE_DIR REPLAY_FILE BASE_SHIM NEW_SHIM [ROUNDS]
# Rows: build, H3SHIM_LEARN, then the median observed/paused ratio and the
# median difference in ns a call (bench_cpu's two numbers).
set -eu
bench=$1 dir=$2 replay=$3 base=$4 new=$5 rounds=${6:-3}
pairs=${BENCH_PAIRS:-200} n=${H3BENCH_CALLS:-200000}
echo "# bench_cpu BENCH_PAIRS=$pairs on $replay, $n calls a process; columns: build, H3SHIM_LEARN, observed/paused median ratio, median ns a call"
echo "# $(uname -m), $(nproc) cores, $(date -u +%Y-%m-%d)"
r=0
while [ $r -lt "$rounds" ]; do
  for build in base new; do
    shim=$base
    [ $build = new ] && shim=$new
    for learn in 1 0; do
      printf '%s L=%s ' $build $learn
      BENCH_PAIRS=$pairs H3SHIM_LEARN=$learn LD_PRELOAD="$shim" H3SHIM_SIGNATURES=signatures \
        "$bench" "$dir" "replay:$replay" "$n" 2>/dev/null | tr '\n' ' '
      echo
    done
  done
  r=$((r + 1))
done
