#!/usr/bin/env bash
# The one command for the GPU machine: builds h3shim and produces the GPU evidence.
#
#   tests/gpu/run.sh [--quick | --full] [--no-build]
#
# --quick (default) decodes latent [1,24,12,24,24] (8 ViT calls of 1797 tokens,
# full 36 blocks) in every arm and finishes well inside 10 minutes on an H200;
# --full decodes [1,24,37,32,48] (84 ViT calls, 3024 block calls, 124 frames of
# 512x768) instead. --no-build uses build/libh3shim.so as it is. Arms that need
# the shim are reported as "skipped: no shim" when it is missing.
#
# Environment: H3SHIM_OP_LIST (space-separated op names, one arm each; default swiglu weight_cache norm_cast residual_norm qk_norm_rope),
# H3_GPU_BUDGET_S (seconds for the whole run, default 570), PYTHON (default
# python3), OUT (when set, the evidence, logs and compressed traces are copied
# there too), H3_KEEP_WORK=1 (keep the scratch directory with the full traces
# and logs). The evidence is tests/evidence/<date>-<gpu>[-full].json and .md.
# Exit status: 0 when every check passed or was skipped, 1 when one failed or
# the build failed, 2 for a usage error.
set -euo pipefail
export PYTHONUNBUFFERED=1

start=$(date +%s)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

mode=quick
build=1
for arg in "$@"; do
    case "$arg" in
        --quick) mode=quick ;;
        --full) mode=full ;;
        --no-build) build=0 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument '$arg' (expected --quick, --full, --no-build)" >&2; exit 2 ;;
    esac
done

python=${PYTHON:-python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "run.sh: $python cannot import torch; install PyTorch (the evidence needs torch with CUDA)" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/h3shim-gpu.XXXXXX")
if [[ ${H3_KEEP_WORK:-0} == 1 ]]; then
    echo "run.sh: keeping the scratch directory $work"
else
    trap 'rm -rf "$work"' EXIT
fi

if [[ $build -eq 1 ]]; then
    echo "run.sh: building the shim (make -j$(nproc))"
    if ! make -j"$(nproc)"; then
        echo "run.sh: make failed; fix the build, or rerun with --no-build to measure without a fresh shim" >&2
        exit 1
    fi
fi
shim=$PWD/build/libh3shim.so
if [[ ! -f $shim ]]; then
    echo "run.sh: $shim does not exist; the arms that need the shim will be reported as skipped" >&2
fi

copy_to=()
if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT"
    copy_to=(--copy-to "$OUT")
fi

status=0
"$python" tests/gpu/harness.py --mode "$mode" --shim "$shim" --work "$work" \
    --deadline "$((start + ${H3_GPU_BUDGET_S:-570}))" ${copy_to[@]+"${copy_to[@]}"} || status=$?
exit "$status"
