#!/bin/sh
# Per-call overhead of the interposer on the fake stack, tracing off:
# alternating runs without and with the shim preloaded, medians.
# usage: bench_cpu.sh BENCH_BINARY SHIM FAKE_DIR
set -eu
bench=$1 shim=$2 dir=$3
runs=${H3BENCH_RUNS:-7} n=${H3BENCH_CALLS:-2000000}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-20s %12s %12s %12s %8s\n' api direct_ns shim_ns added_ns ratio
for api in cuLaunchKernel __cudaLaunchKernel cublasGemmEx; do
  : > /tmp/h3bench.direct; : > /tmp/h3bench.shim
  i=0
  while [ $i -lt "$runs" ]; do
    env -u LD_PRELOAD "$bench" "$dir" "$api" "$n" >> /tmp/h3bench.direct
    LD_PRELOAD="$shim" "$bench" "$dir" "$api" "$n" >> /tmp/h3bench.shim
    i=$((i + 1))
  done
  d=$(median < /tmp/h3bench.direct) s=$(median < /tmp/h3bench.shim)
  awk -v a="$api" -v d="$d" -v s="$s" 'BEGIN { printf "%-20s %12.2f %12.2f %12.2f %8.3f\n", a, d, s, s - d, s / d }'
done
echo "(__cudaLaunchKernel crosses the shim twice: the runtime's own driver launch is interposed too)"
