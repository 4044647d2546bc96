#!/usr/bin/env bash
# Traces the H3 block as the serving pipeline runs it, for the recorder
# (scripts/record_signature.py; signatures/README.md says how to record).
#
#   tests/gpu/record_serving.sh [OUT_DIR]     (default /tmp/h3sig-serving)
#
# serve.py --mode serving decodes each request in one autocast region with
# its cast cache on and the parameters requiring grad: a request's first
# tile casts each weight once (and autocast keeps the casts), its later
# tiles cast none. Two processes of one command (two tiles a request, three
# blocks, a warm-up and two requests) and one of another (three tiles, one
# request) are traced with the ops off, and the traces gzipped in OUT_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-/tmp/h3sig-serving}
shim=$PWD/build/libh3shim.so
[[ -f $shim ]] || { echo "record_serving.sh: build the shim first (make)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
trace() {
    local tag=$1
    shift
    H3SHIM_OPS=none H3SHIM_TRACE="$out/trace-$tag-%p.jsonl" H3SHIM_TRACE_PARAMS=1 LD_PRELOAD=$shim \
        python3 scripts/serve.py --mode serving --blocks 3 --trace-mark "$@" >/dev/null
}
trace a --latent 1,24,7,16,24 --requests 2
trace b --latent 1,24,7,16,24 --requests 2
trace c --latent 1,24,7,16,32 --requests 1 --warmup 0
gzip "$out"/*.jsonl
ls -l "$out"
