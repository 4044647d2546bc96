#!/usr/bin/env bash
# The shim with its defaults (no H3SHIM_* variable but H3SHIM_STATS=1) on the
# quick decode, eager and with CUDA graphs, against the unshimmed decode: bitwise
# comparison and the shim's matcher, engine and op lines. About 40 s on an H200.
#   tests/gpu/quick_defaults.sh [OUT_MD]   (default: print the summary)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
make -s -j"$(nproc)" >/dev/null
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
latent=1,24,12,24,24
env -u LD_PRELOAD python3 scripts/serve.py --latent $latent --requests 1 --warmup 1 --out "$work/ref.pt" --json >/dev/null
for mode in eager graphs; do
    extra=(); [[ $mode == graphs ]] && extra=(--cuda-graphs)
    H3SHIM_STATS=1 LD_PRELOAD=$PWD/build/libh3shim.so python3 scripts/serve.py --latent $latent --requests 1 \
        --warmup 1 "${extra[@]}" --out "$work/$mode.pt" --json >/dev/null 2>"$work/$mode.err"
done
{
    echo "# The shim with its defaults, quick decode, $(python3 -c 'import torch; print(torch.cuda.get_device_name())'), $(date +%F)"
    echo
    echo "latent [$latent], a warm-up and one request per process; \`H3SHIM_STATS=1\` and nothing else set."
    echo
    python3 - "$work" <<'PY'
import sys, torch
w = sys.argv[1]
a = torch.load(f"{w}/ref.pt")
for mode in ("eager", "graphs"):
    b = torch.load(f"{w}/{mode}.pt")
    eq = torch.equal(a.view(torch.int32), b.view(torch.int32))
    print(f"- {mode}: output {list(b.shape)}, bitwise equal to the unshimmed decode: {eq}")
PY
    for mode in eager graphs; do
        echo; echo "Stats, $mode:"; echo; echo '```'
        grep -E "stats: (signature|engine|op |flush)" "$work/$mode.err" | sed 's/^h3shim: [0-9]* stats: //'
        echo '```'
    done
} > "${1:-/dev/stdout}"
