#!/usr/bin/env bash
# One call on the GPU machine for the evidence that changes most often: builds
# the shim, then runs the named steps in order, each under its own time limit,
# and packs every evidence file and log into one archive, rewritten after each
# step (so a call that runs out of time still returns what finished).
#
#   tests/gpu/session.sh [STEP...]     (default: decode threads variants)
#
# Steps (about how long each takes on an H200):
#   kernels    each kernel's test against PyTorch, and weight_cache's (3-4 min);
#              kernel-NAME runs one of them (tests/gpu/test_NAME.py)
#   decode     full_decode.py: A, G and the defaults S, SG, 3 rounds; per request
#              latency and host time, so host-bound requests show (4 min)
#   quick      full_decode.py on the quick latent, defaults, 1 round (1 min)
#   floor      host_time.py --floor: the shim's own time per block against
#              PyTorch's dispatch floor, 3 rounds; with build/base.tar (git
#              archive of another commit) that build beside this one (3-5 min)
#   own        floor's T (and TB) alone, pinned to CPUs 2-3, 5 rounds: two
#              builds' own time per block side by side (4-6 min)
#   own-lt     the same, TB being this build with H3SHIM_LT_SHADOW=0, 4 rounds
#              (3-4 min)
#   lt-check   the quick decode with H3SHIM_LT_SHADOW=2: every GEMM described
#              from remembered descriptors is read too and compared (1 min)
#   graphs     weight_cache inside captures: test_weight_cache.py --graphs, then the
#              quick and the full decode with arms SG (the defaults) and NG
#              (H3SHIM_WEIGHT_CACHE_GRAPHS=0) (5 min)
#   profile    serve.py --profile-block without and with the shim (defaults, and
#              the defaults with H3SHIM_SKIP_RELEASED=0): one block at 1797
#              tokens, eager, graph replay and per-kernel GPU time (2 min)
#   profile-vit  serve.py --profile-vit without the shim (A), with the defaults (S)
#              and with weight_cache off (W): one ViT call at 1797 tokens (36
#              blocks) as a CUDA-graph replay, its kernels' GPU time and the idle
#              gaps between them per block, the SM clock and power under it (2 min)
#   released   full_decode.py: the defaults beside H3SHIM_SKIP_RELEASED=0 (arms
#              K, KG), eager and graphs, on the quick latent, 1 round (2 min);
#              released-decode the same on the full decode, 2 rounds (7-8 min)
#   pairs      robust.py's workloads arms P, N and Q alone (pairs of loops observed
#              and paused: the defaults, learning off, the defaults with stats)
#              for PAIRS_WORKLOADS (default: the Llama and the ViT), 3 rounds (5 min; 2 rounds of the
#              two fit in 290 s at 1b52b16); pairs-fine the same with loops of one
#              iteration (300 pairs a process: a pair's two loops meet the same host)
#   learner-costs  for each of PAIRS_WORKLOADS alone: a traced process (robust.py's
#              timed loops) summarised by tests/tools/trace_learner.py (what the learner
#              kept of one iteration, call by call), and arm Q alone with learning on
#              and off, 300 pairs of one iteration, its stats whole (2-3 min)
#   trace      a Chrome-format trace of one quick request with two blocks, gzipped (1 min)
#   learn-shapes  learn_shapes.py with no signature loaded: block stacks at 261-1797
#              tokens, batches 1, 2, 4, every one learned in the process, bitwise
#              against the unobserved stack, GPU time per block from CUDA-graph
#              replays back to back and spaced by idle time (--space-ms), the SM clock,
#              power and energy a block under each (3-4 min, and 2.5 more for
#              the clocks: 3 s a graph)
#   learn-edge  learn_shapes.py at 517 and 773 tokens alone, 5 pairs (1 min)
#   learn-decode  full_decode.py, serving mode: the committed signatures (S, SG)
#              beside none, every signature learned (L, LG), 1 round (4 min);
#              learn-inference the same in inference mode; learn-quick on the
#              quick latent (1-2 min); learn-variants robust.py's variants and
#              workloads with no signature loaded (4-6 min)
#   learn-tiles  full_decode.py on the quick latent with serve.py --tile 7,12,16
#              (1349-token tiles) and with --tile-batch 2, the defaults (S) and
#              no signature loaded (L, LG), 1 round each (3 min)
#   verify     full_decode.py with H3SHIM_VERIFY=3 (V) beside the defaults (S),
#              and build-ulp (make KERNEL_DEFS=-DH3_TEST_SWIGLU_ULP: a wrong
#              swiglu kernel) with it (U) and without it (UN), 1 round (5 min);
#              verify-quick the same on the quick latent, with VG (2 min)
#   validate   tests/gpu/validate.py: the validation command's report (up to 10 min)
#   soundness  soundness.py: the eight real-program cases, each with and without the
#              shim (3 min); soundness-expandable the same with
#              PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (3 min)
#   variants threads children compiled implementations workloads nccl
#              robust.py's items, 2 rounds (workloads: 3 rounds, 5-8 min); each
#              stops before a round that would outrun its limit and
#              reports the rounds done (5 rounds outran 420 s at 369a5b8
#              and left nothing)                                      (1-8 min)
# OWN_ROUNDS, WORKLOADS_ROUNDS and DECODE_ROUNDS set those steps' rounds (5, 3 and 3).
# The archive is $OUT/session.tgz when OUT is set, else build/session.tgz; the
# evidence files also land in tests/evidence/. Exit status: 1 when a step failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(decode threads variants)
dest=${OUT:-$PWD/build}
work=$(mktemp -d "${TMPDIR:-/tmp}/h3shim-session.XXXXXX")
export OUT=$work
status=0
# The GPU's name as the Python scripts put it in evidence files' names ("NVIDIA H200" -> nvidia-h200).
# (nvidia-smi that cannot reach the driver prints its error on stdout: no name then.)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || gpu_name=
gpu_slug=$(tr '[:upper:]' '[:lower:]' <<<"$gpu_name" | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')
gpu_slug=${gpu_slug:-no-gpu}
pack() { tar czf "$dest/session.tgz" -C "$work" . ; }

if ! make -j"$(nproc)" >"$work/make.log" 2>&1; then
    tail -20 "$work/make.log"; pack; exit 1
fi
run() { # NAME LIMIT COMMAND...
    local name=$1 limit=$2; shift 2
    echo "== $name (at most ${limit}s)"
    timeout "$limit" "$@" >"$work/$name.log" 2>&1
    local rc=$?
    grep -E '^\| [A-Z]|Result|differing|: (pass|FAIL|skipped)|ran with|fallback|median ms|lt_shadow|differs|complete, |T over' "$work/$name.log" | cut -c1-300 | tail -20
    echo "== $name: rc=$rc"
    [[ $rc -eq 0 ]] || status=1
    pack
}
# With build/base.tar (git archive of another commit): builds it beside this
# one and sets b=(--shim-b ITS_LIBRARY) for host_time.py; else b=().
base_build() {
    b=()
    local lib="$work/base/build/libh3shim.so"
    if [[ ! -f $lib && -f build/base.tar ]]; then
        mkdir -p "$work/base" && tar xf build/base.tar -C "$work/base"
        # The same kernel sources need not be compiled twice.
        if diff -rq kernels "$work/base/kernels" >/dev/null; then
            mkdir -p "$work/base/build" && cp build/kernels.fatbin build/kernels_fatbin.o "$work/base/build/"
        fi
        make -C "$work/base" -j"$(nproc)" build/libh3shim.so >"$work/base-make.log" 2>&1 || tail -5 "$work/base-make.log"
    fi
    [[ -f $lib ]] && b=(--shim-b "$lib")
    return 0
}
# profile_arms NAME FLAG LIMIT TITLE ABOUT ARM[:VAR=VALUE]...: `serve.py FLAG --json`
# for each arm (A without the shim, the others with its defaults, H3SHIM_STATS=1
# and their own setting), each document ...-NAME-ARM.json (stdout) beside its
# stats (stderr), then their table ...-NAME.md (TITLE and ABOUT: empty for
# profile_table.py's own).
profile_arms() {
    local name=$1 flag=$2 limit=$3 title=$4 about=$5 spec arm
    shift 5
    local p docs=()
    p="$work/$(date +%F)-$gpu_slug-$name"
    for spec in "$@"; do
        arm=${spec%%:*}
        local pre=()
        [[ $arm != A ]] && pre=(env LD_PRELOAD="$PWD/build/libh3shim.so" H3SHIM_STATS=1)
        [[ $spec == *:* ]] && pre+=("${spec#*:}")
        run "$name-$arm" "$limit" bash -c '"${@:2}" 2>"$1"' _ "$work/$name-$arm.err" \
            ${pre[@]+"${pre[@]}"} python3 scripts/serve.py "$flag" --json
        mv "$work/$name-$arm.log" "$p-$arm.json"
        docs+=("$arm=$p-$arm.json")
    done
    python3 tests/gpu/profile_table.py "${docs[@]}" ${title:+--title "$title"} ${about:+--about "$about"} >"$p.md"
}
VIT_ABOUT="GPU time per block, ms: a ViT call at 1797 tokens captured as the --cuda-graphs decode captures it, \
the profiler over 20 replays; A without the shim, S the defaults, W the defaults with weight_cache off."
for step in "${steps[@]}"; do
    case $step in
        kernels)
            # (test_norm_cast.py and test_residual_norm.py are the harness's names for two of these)
            for t in rmsnorm residual_rmsnorm qk_norm_rope swiglu weight_cache verify; do
                run "kernel-$t" 200 python3 "tests/gpu/test_$t.py" --fatbin build/kernels.fatbin
            done ;;
        kernel-*) run "$step" 200 python3 "tests/gpu/test_${step#kernel-}.py" --fatbin build/kernels.fatbin ;;
        decode) run decode 420 python3 tests/gpu/full_decode.py --arms S,SG --rounds "${DECODE_ROUNDS:-3}" --tag=-defaults ;;
        floor)
            base_build
            run floor 420 python3 tests/gpu/host_time.py --floor --rounds 3 ${b[@]+"${b[@]}"} ;;
        own)
            base_build
            run own 420 python3 tests/gpu/host_time.py --floor --no-s --pin 2-3 --rounds "${OWN_ROUNDS:-5}" \
                ${b[@]+"${b[@]}"} --tag=-own ;;
        own-lt)
            # The same build with H3SHIM_LT_SHADOW=0 as TB: what remembering descriptors saves.
            run own-lt 420 python3 tests/gpu/host_time.py --floor --no-s --pin 2-3 --rounds 4 \
                --env-b H3SHIM_LT_SHADOW=0 --tag=-own-lt ;;
        lt-check)
            # The block's GEMMs described from remembered cuBLASLt descriptors, each checked against reads.
            run lt-check 150 env H3SHIM_LT_SHADOW=2 H3SHIM_STATS=1 LD_PRELOAD="$PWD/build/libh3shim.so" \
                python3 scripts/serve.py --latent 1,24,12,24,24 --requests 2 ;;
        quick) run quick 120 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,SG --rounds 1 --tag=-quick-defaults ;;
        profile-vit)
            profile_arms profile-vit --profile-vit 150 "One ViT call (36 blocks) replayed from a CUDA graph, per block" \
                "$VIT_ABOUT" A S W:H3SHIM_OP_WEIGHT_CACHE=0 ;;
        released)
            # The defaults beside H3SHIM_SKIP_RELEASED=0 (K, KG: every output written), quick latent.
            run released-quick 150 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,K,SG,KG \
                --rounds 1 --tag=-quick-released ;;
        released-decode)
            run released-decode 540 python3 tests/gpu/full_decode.py --arms S,K,SG,KG --rounds 2 --tag=-released ;;
        workloads) run workloads 540 python3 tests/gpu/robust.py --items workloads --rounds "${WORKLOADS_ROUNDS:-3}" --deadline 480 \
                       --tag=-workloads ;;
        pairs|pairs-fine) # the host-bound workloads' pairs: the defaults (P), learning off (N), with stats (Q),
            # 3 rounds; pairs-fine: pairs of one iteration each (300 pairs a process)
            run "$step" 340 env H3_ROBUST_WORKLOADS="${PAIRS_WORKLOADS:-llama_8l_fp16,vit_b16_bf16}" \
                H3_ROBUST_PAIR_ITERS="$([[ $step == pairs-fine ]] && echo 1 || echo 20)" \
                python3 tests/gpu/robust.py --items workloads --rounds 3 --workload-arms A,P,N,Q --deadline 300 \
                --tag="-workloads-$step" ;;
        learner-costs)
            for w in $(tr , ' ' <<<"${PAIRS_WORKLOADS:-llama_8l_fp16,vit_b16_bf16}"); do
                run "learner-trace-$w" 150 env H3_ROBUST_WORKLOADS="$w" LD_PRELOAD="$PWD/build/libh3shim.so" \
                    H3SHIM_TRACE="$work/trace-$w.jsonl" python3 tests/gpu/robust.py --child workloads
                python3 tests/tools/trace_learner.py "$work/trace-$w.jsonl" --json "$work/learner-trace-$w.json" \
                    >"$work/learner-trace-$w.md" && rm -f "$work/trace-$w.jsonl"
                for learn in 1 0; do
                    run "learner-stats-$w-learn$learn" 150 env H3_ROBUST_WORKLOADS="$w" \
                        LD_PRELOAD="$PWD/build/libh3shim.so" H3SHIM_STATS=1 H3SHIM_LEARN=$learn H3_ROBUST_PAUSE=1 \
                        H3_ROBUST_PAIR_ITERS=1 python3 tests/gpu/robust.py --child workloads
                done
            done
            ev="tests/evidence/$(date -u +%F)-$gpu_slug-learner-costs"
            python3 tests/tools/trace_learner.py --evidence "$ev" "$work" \
                $(tr , ' ' <<<"${PAIRS_WORKLOADS:-llama_8l_fp16,vit_b16_bf16}") && cp "$ev".json "$ev".md "$work"/
            pack ;;
        graphs)
            run graphs-weights 150 python3 tests/gpu/test_weight_cache.py --graphs
            run graphs-quick 150 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms SG,NG --rounds 1 --tag=-quick-graphs
            run graphs-decode 300 python3 tests/gpu/full_decode.py --arms SG,NG --rounds 2 --tag=-graphs ;;
        profile)
            # K: the defaults with every output written (H3SHIM_SKIP_RELEASED=0).
            profile_arms profile-block --profile-block 120 "" "" A S K:H3SHIM_SKIP_RELEASED=0 ;;
        trace)
            # A Chrome-format trace of one quick request with two blocks (tiles of
            # the recorded 1797 tokens: the blocks fuse), gzipped,
            # for scripts/perfetto_screenshot.py.
            run trace 120 env LD_PRELOAD="$PWD/build/libh3shim.so" H3SHIM_TRACE="$work/trace.json" \
                H3SHIM_TRACE_FORMAT=chrome python3 scripts/serve.py --latent 1,24,12,24,24 --blocks 2 --requests 1 --warmup 0
            gzip -c "$work/trace.json" >"$work/$(date +%F)-$gpu_slug-trace-chrome.json.gz"
            rm -f "$work/trace.json" ;;
        learn-shapes) run learn-shapes 540 python3 tests/gpu/learn_shapes.py --pairs 10 --evidence ;;
        learn-edge) run learn-edge 150 python3 tests/gpu/learn_shapes.py --tokens 517,773 --pairs 5 --evidence \
                        --tag=-edge ;;
        learn-decode) run learn-decode 420 python3 tests/gpu/full_decode.py --arms S,SG,L,LG --rounds 1 --requests 1 \
                          --tag=-learned ;;
        learn-inference) run learn-inference 420 python3 tests/gpu/full_decode.py --mode inference --arms S,SG,L,LG \
                             --rounds 1 --requests 1 --tag=-inference-learned ;;
        learn-tiles) # serve.py decodes of 1349-token tiles, and of tiles batched by 2, nothing committed covers
            run learn-tiles-1349 200 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,L,LG --rounds 1 \
                --serve-args "--tile 7,12,16" --tag=-quick-tile-1349-learned
            run learn-tiles-batch2 200 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,L,LG --rounds 1 \
                --serve-args "--tile-batch 2" --tag=-quick-tile-batch2-learned ;;
        verify) # verify mode: the full decode with H3SHIM_VERIFY=3 (V), and a build with a wrong swiglu
            # kernel with it (U: bitwise, the op off) and without it (UN: its bits differ)
            make -j"$(nproc)" B=build-ulp KERNEL_DEFS=-DH3_TEST_SWIGLU_ULP build-ulp/libh3shim.so \
                >"$work/make-ulp.log" 2>&1 || tail -5 "$work/make-ulp.log"
            run verify-decode 560 python3 tests/gpu/full_decode.py --arms S,V,U,UN --rounds 1 --requests 1 \
                --shim-b build-ulp/libh3shim.so --tag=-verify ;;
        verify-quick) # the same on the quick latent, with CUDA graphs (VG) too
            make -j"$(nproc)" B=build-ulp KERNEL_DEFS=-DH3_TEST_SWIGLU_ULP build-ulp/libh3shim.so \
                >"$work/make-ulp.log" 2>&1 || tail -5 "$work/make-ulp.log"
            run verify-quick 200 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,V,VG,U,UN \
                --rounds 1 --shim-b build-ulp/libh3shim.so --tag=-quick-verify ;;
        validate) run validate 590 python3 tests/gpu/validate.py ;;
        soundness) run soundness 300 python3 tests/gpu/soundness.py ;;
        soundness-expandable) # the same with PyTorch's expandable segments (empty_cache unmaps, never frees)
            run soundness-expandable 300 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
                python3 tests/gpu/soundness.py --tag=-expandable ;;
        learn-variants) # robust.py's variants and workloads with no signature loaded: what is learned, what falls back
            run learn-variants 400 env H3_ROBUST_SIGNATURES="$(mktemp -d)" python3 tests/gpu/robust.py \
                --items variants,workloads --rounds 1 --deadline 380 --tag=-learned ;;
        learn-quick) run learn-quick 200 python3 tests/gpu/full_decode.py --latent 1,24,12,24,24 --arms S,SG,L,LG \
                         --rounds 1 --tag=-quick-learned ;;
        variants|threads|children|compiled|implementations|nccl)
            run "$step" 300 python3 tests/gpu/robust.py --items "$step" --rounds 2 --deadline 250 --tag="-$step" ;;
        *) echo "session.sh: unknown step '$step'" >&2; status=2 ;;
    esac
done
pack
echo "session.sh: archive $dest/session.tgz"
exit "$status"
