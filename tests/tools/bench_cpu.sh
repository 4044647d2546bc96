#!/bin/sh
# Per-call overhead of the interposer on the fake stack, tracing off:
# alternating runs without and with the shim preloaded, medians.
# usage: bench_cpu.sh BENCH_BINARY SHIM FAKE_DIR REPLAY_FILE SIGNATURES
# Rows: one entry point called in a loop (ops off, then the defaults); then the recorded H3 block stream
# (REPLAY_FILE, launches decoded beforehand, library calls made as PyTorch
# makes them) with the shim passing through, with the matcher, with the
# engine holding back and replaying every group (H3SHIM_OP_REPLAY=1), and with
# the defaults (the ops validated on SM 90: the fake driver reports SM 90 and a fake module).
set -eu
bench=$1 shim=$2 dir=$3 replay=$4 sigs=$5
runs=${H3BENCH_RUNS:-7} n=${H3BENCH_CALLS:-2000000}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-28s %12s %12s %12s %8s\n' row direct_ns shim_ns added_ns ratio
row() { # NAME API CALLS SHIM_ENV...
  name=$1 api=$2 calls=$3
  shift 3
  : > /tmp/h3bench.direct; : > /tmp/h3bench.shim
  i=0
  while [ $i -lt "$runs" ]; do
    env -u LD_PRELOAD "$bench" "$dir" "$api" "$calls" >> /tmp/h3bench.direct
    env "$@" LD_PRELOAD="$shim" H3SHIM_SIGNATURES="$sigs" "$bench" "$dir" "$api" "$calls" >> /tmp/h3bench.shim
    i=$((i + 1))
  done
  d=$(median < /tmp/h3bench.direct) s=$(median < /tmp/h3bench.shim)
  awk -v a="$name" -v d="$d" -v s="$s" 'BEGIN { printf "%-28s %12.2f %12.2f %12.2f %8.3f\n", a, d, s, s - d, s / d }'
}
for api in cuLaunchKernel __cudaLaunchKernel cublasGemmEx; do
  row "$api" "$api" "$n" H3SHIM_OPS=none
done
# The same calls with the defaults (ops on, so every call meets the matcher):
# what another model's launches and GEMMs pay.
for api in __cudaLaunchKernel cublasGemmEx; do
  row "$api, defaults" "$api" "$n" H3SHIM_MATCH=0
done
blocks=$((n / 40))
row "h3 stream, pass-through" "replay:$replay" "$blocks" H3SHIM_OPS=none
row "h3 stream, matcher" "replay:$replay" "$blocks" H3SHIM_OPS=none H3SHIM_MATCH=1
row "h3 stream, replay op" "replay:$replay" "$blocks" H3SHIM_OPS=none H3SHIM_OP_REPLAY=1
row "h3 stream, defaults (ops on)" "replay:$replay" "$blocks" H3SHIM_MATCH=0
# The block's cuBLASLt calls alone with the output's rows changed (field 38
# of an M line): GEMMs of another model, outside any block.
awk '$1 == "M" { $38 = $38 + 8; print }' "$replay" > /tmp/h3bench.gemms
row "GEMMs outside a block" "replay:/tmp/h3bench.gemms" "$blocks"
echo "(__cudaLaunchKernel crosses the shim twice: the runtime's own driver launch is interposed too."
echo " The h3 stream is tests/record/data's H200 block trace, 516 calls, cycled; its library calls"
echo " create and destroy their descriptors as PyTorch does, which most of direct_ns is.)"
# The shim's own time per call on the h3 stream with the defaults, from its
# stats (one-off work and the stats' clock reads inside its parts taken out),
# with nothing and with 2 MiB touched between calls (FW_BENCH_EVICT_KB): a
# real process's framework evicts the shim's data between two launches, and
# the second row is what the H200's process shows.  Cache lines, not
# instructions, are what its time is made of there.
own_row() { # NAME REPLAY_FILE EVICT_KB
  : > /tmp/h3bench.own
  i=0
  while [ $i -lt "$runs" ]; do
    FW_BENCH_EVICT_KB=$3 LD_PRELOAD="$shim" H3SHIM_SIGNATURES="$sigs" H3SHIM_STATS=1 H3SHIM_MATCH=0 \
      "$bench" "$dir" "replay:$2" 30000 2>&1 >/dev/null |
      sed -n 's/.*without them and the one-off work, \([0-9]*\) ns per call of its own.*/\1/p' >> /tmp/h3bench.own
    i=$((i + 1))
  done
  printf '%-52s %8s ns per call of its own\n' "$1, defaults, $3 KiB evicted a call" "$(median < /tmp/h3bench.own)"
}
own_row "h3 stream" "$replay" 0
own_row "h3 stream" "$replay" 2048
# Another model's calls: the same stream with its kernels renamed and its GEMMs reshaped.
awk '$1 == "L" { $2 = "X" $2 } $1 == "M" { $38 = $38 + 8 } { print }' "$replay" > /tmp/h3bench.foreign
own_row "another model's calls" /tmp/h3bench.foreign 2048
# Another model's layers with a cuBLAS GEMM every 7 calls (a transformers Llama's in FP16,
# replay_mutate.py gapped): they repeat, never as a group, so the learner keeps every launch.
own_row "another model's layers (cuBLAS GEMMs)" "$(dirname "$replay")/gapped-replay.txt" 2048
