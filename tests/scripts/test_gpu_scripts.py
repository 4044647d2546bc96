#!/usr/bin/env python3
"""CPU tests of the GPU scripts' own logic (tests/gpu), which decides what the
evidence says: the decode verdict (shimstats.ops_verdict), robust.py's
--deadline, soundness.py's comparison of its two arms, learn_shapes.py's
verdict and flow, and validate.py's steps and report. PyTorch is stubbed; nothing here needs a GPU.

    python3 tests/scripts/test_gpu_scripts.py
"""
import contextlib
import io
import os
import sys
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import shimstats  # noqa: E402

BLOCK = "minimax-h3-vae-decoder/block"


def stats(runs, fallbacks=(), blocks=9):
    """A stats table as the shim prints it: residual_norm planned twice per block."""
    lines = [f"h3shim: 1 stats: plan {BLOCK}: op residual_norm takes calls 28,29,30,33",
             f"h3shim: 1 stats: plan {BLOCK}: op residual_norm takes calls 40,41",
             f"h3shim: 1 stats: signature {BLOCK}: {blocks} complete, 0 broken",
             "h3shim: 1 stats: engine: 100 launches deferred; 0 issued with an error",
             f"h3shim: 1 stats: op residual_norm {runs} groups run ({3 * runs} calls)"]
    lines += [f"h3shim: 1 stats: op residual_norm fallback {why:<20} {n}" for why, n in fallbacks]
    return "\n".join(lines)


class TilePlan(unittest.TestCase):
    """serve.py's plan counts the ViT calls a --tile-batch decode makes (full_decode.py's verdict reads them)."""

    def test_batched_tiles_are_counted_per_call(self):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
        import h3_tiling
        plan = h3_tiling.make_plan(h3_tiling.parse_latent("1,24,12,24,24"), 36, h3_tiling.parse_tile("7,16,16"))
        self.assertEqual((plan.summary()["vit_calls"], plan.summary()["block_calls"]), (8, 288))
        self.assertEqual((plan.summary(2)["vit_calls"], plan.summary(2)["block_calls"]), (4, 144))
        self.assertEqual(plan.summary(3)["vit_calls"], 4)  # 4 tiles a chunk: a call of 3, a call of 1


class ValidateOnANewSM(unittest.TestCase):
    """validate.py asks for every op where none is validated, and the scripts pass it to the shim."""

    def test_unvalidated_sms(self):
        import validate
        self.assertFalse(validate.unvalidated("9.0"))
        self.assertTrue(validate.unvalidated("10.0"))
        self.assertTrue(validate.unvalidated("10.3"))
        self.assertFalse(validate.unvalidated(None))

    def test_the_asked_env(self):
        with mock.patch.dict(os.environ, {"H3_VALIDATE_ENV": "H3SHIM_OPS=all,H3SHIM_VERIFY=0"}):
            self.assertEqual(shimstats.asked_env(), {"H3SHIM_OPS": "all", "H3SHIM_VERIFY": "0"})
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(shimstats.asked_env(), {})


class VerifyVerdict(unittest.TestCase):
    """shimstats.verify_verdict: every place of an op fused, compared, or fallen back for verify mode."""

    @staticmethod
    def table(runs, compared, equal, differing, fallbacks=(), off=False, warn=False):
        lines = [f"h3shim: 1 stats: plan {BLOCK}: op swiglu takes calls 35,36",
                 f"h3shim: 1 stats: signature {BLOCK}: 9 complete, 0 broken",
                 "h3shim: 1 stats: engine: 100 launches deferred; 0 issued with an error",
                 f"h3shim: 1 stats: op swiglu       {runs} groups run ({2 * runs} calls)",
                 f"h3shim: 1 stats: verify: op swiglu       3 runs a range; {compared} compared, {equal} equal, "
                 f"{differing} differing, 0 not read; {1 if equal >= 3 else 0} ranges verified"
                 + ("; off (a difference)" if off else "")]
        lines += [f"h3shim: 1 stats: op swiglu       fallback {why:<20} {n}" for why, n in fallbacks]
        if warn:
            lines.append("h3shim: 1 WARN verify: op swiglu differs from the calls it replaces (...)")
        return "\n".join(lines)

    def test_compared_then_fused(self):
        ok, _ = shimstats.verify_verdict(self.table(5, 3, 3, 0, [("verify_busy", 1)]), 9, ["swiglu"])
        self.assertTrue(ok)

    def test_a_place_unaccounted_fails(self):
        self.assertFalse(shimstats.verify_verdict(self.table(5, 3, 3, 0), 9, ["swiglu"])[0])

    def test_a_difference_fails_unless_expected(self):
        t = self.table(0, 1, 0, 1, [("verify_differed", 8)], off=True, warn=True)
        self.assertFalse(shimstats.verify_verdict(t, 9, ["swiglu"])[0])
        self.assertTrue(shimstats.verify_verdict(t, 9, ["swiglu"], wrong=("swiglu",))[0])

    def test_never_compared_fails(self):
        self.assertFalse(shimstats.verify_verdict(self.table(9, 0, 0, 0), 9, ["swiglu"])[0])

    def test_runs_that_compared_no_output_fail(self):
        t = self.table(5, 3, 3, 0, [("verify_busy", 1)]).replace("ranges verified", "ranges verified; 0 outputs compared, 6 not (freed first)")
        self.assertFalse(shimstats.verify_verdict(t, 9, ["swiglu"])[0])
        t = self.table(5, 3, 3, 0, [("verify_busy", 1)]).replace("ranges verified", "ranges verified; 3 outputs compared, 0 not (freed first)")
        self.assertTrue(shimstats.verify_verdict(t, 9, ["swiglu"])[0])


class OpsVerdict(unittest.TestCase):
    def test_every_place_run(self):
        self.assertTrue(shimstats.ops_verdict(stats(18), 9, ["residual_norm"])[0])

    def test_an_aliased_fallback_counts_as_covered(self):
        ok, text = shimstats.ops_verdict(stats(17, [("aliased", 1)]), 9, ["residual_norm"])
        self.assertTrue(ok, text)
        self.assertIn("aliased", text)

    def test_another_fallback_fails(self):
        self.assertFalse(shimstats.ops_verdict(stats(17, [("layout", 1)]), 9, ["residual_norm"])[0])

    def test_a_place_neither_run_nor_fallen_back_fails(self):
        self.assertFalse(shimstats.ops_verdict(stats(16, [("aliased", 1)]), 9, ["residual_norm"])[0])

    def test_an_op_that_only_fell_back_fails(self):
        self.assertFalse(shimstats.ops_verdict(stats(0, [("aliased", 18)]), 9, ["residual_norm"])[0])


class ServingVerdict(unittest.TestCase):
    """The serving mode's blocks come under two signatures: weight_cache has places only in the first."""

    LINES = "\n".join([
        "h3shim: 1 stats: signature minimax-h3-vae-decoder/block: 0 complete, 40 broken (first break: wiring at call 30)",
        "h3shim: 1 stats: signature minimax-h3-vae-decoder/block-serving-cached: 6 complete, 9 broken",
        "h3shim: 1 stats: signature minimax-h3-vae-decoder/block-serving-first: 3 complete, 0 broken",
        "h3shim: 1 stats: plan minimax-h3-vae-decoder/block-serving-cached: op swiglu takes calls 29,30",
        "h3shim: 1 stats: plan minimax-h3-vae-decoder/block-serving-first: op swiglu takes calls 35,36",
        "h3shim: 1 stats: plan minimax-h3-vae-decoder/block-serving-first: op weight_cache takes calls 1,2 and the "
        "library call 4",
        "h3shim: 1 stats: plan minimax-h3-vae-decoder/block-serving-first: op weight_cache takes calls 25,26 and the "
        "library call 27",
        "h3shim: 1 stats: engine: 100 launches deferred; 0 issued with an error",
        "h3shim: 1 stats: op swiglu       9 groups run (18 calls)",
        "h3shim: 1 stats: op weight_cache 6 groups run (18 calls)",
        "h3shim: 1 stats: weight_cache: 6 copies, 96.0 MiB of GPU memory (peak 128.0 MiB); 0 hits, 6 fills, 0 drops",
        "h3shim: 1 stats: owed writes: 12 made into the program's buffers after the op (still referenced), "
        "0 not made (their buffer freed first)"])

    def test_every_place_of_each_signature(self):
        ok, text = shimstats.ops_verdict(self.LINES, 9, ["swiglu", "weight_cache"])
        self.assertTrue(ok, text)
        self.assertIn("weight_cache ran 6 of 6", text)

    def test_a_missing_place_of_one_signature_fails(self):
        lines = self.LINES.replace("op weight_cache 6 groups", "op weight_cache 5 groups")
        self.assertFalse(shimstats.ops_verdict(lines, 9, ["swiglu", "weight_cache"])[0])

    def test_the_copies_and_the_owed_writes(self):
        out = shimstats.parse(self.LINES)
        self.assertEqual(out["weight_cache"]["peak_mib"], 128.0)
        self.assertEqual(out["owed"], {"made": 12, "not_made": 0})
        self.assertEqual(out["complete"], 9)


class HostTime(unittest.TestCase):
    """The shim's own host time as the stats print it, the steady cost apart."""

    LINES = ("h3shim: 1 stats: shim host time: 98745 observed calls, 1175 ns per call of its own (record, matcher, "
             "engine, op planning; the clock reads included), 1522 ns per call issuing held launches and ops' "
             "kernels and library calls\n"
             "h3shim: 1 stats: shim host time, one-off work in it: the first sight of 90 kernels 31.20 ms, 288 "
             "weight copies made 14.00 ms, 1 loads of the fused kernels 2.10 ms; without them, 694 ns per call "
             "of its own\n")

    def test_mean_and_steady(self):
        out = shimstats.parse(self.LINES)
        self.assertEqual(out["host_ns_per_call"], 1175)
        self.assertEqual(out["forward_ns_per_call"], 1522)
        self.assertEqual(out["host_ns_per_call_steady"], 694)

    def test_no_steady_line(self):
        self.assertNotIn("host_ns_per_call_steady", shimstats.parse(self.LINES.splitlines()[0]))

    # As the H200 printed them at 0487b54 (...-host-time-floor-0487b54.md).
    PARTS = ("h3shim: 954 stats: shim host time per call, its own, by part: describing 577 ns, matching 148 ns, "
             "weight_cache's scans 127 ns, ops' checks and runs 354 ns, the rest (call record, engine's queue) "
             "148 ns\n"
             "h3shim: 954 stats: shim host time, the stats' own clock reads in it: 3.5 a call between its first "
             "and last, 31.9 ns a read (timed at exit); without them and the one-off work, 583 ns per call of "
             "its own\n")

    def test_parts_and_the_figure_without_the_clock_reads(self):
        out = shimstats.parse(self.LINES + self.PARTS)
        self.assertEqual(out["host_ns_by_part"], {"describing": 577, "matching": 148, "weight_cache's scans": 127,
                                                  "ops' checks and runs": 354, "the rest": 148})
        self.assertEqual(out["host_ns_per_call_net"], 583)
        self.assertEqual(out["stats_reads_per_call"], 3.5)
        self.assertEqual(out["clock_read_ns"], 31.9)
        self.assertEqual(out["host_ns_per_call_steady"], 694)


class RobustDeadline(unittest.TestCase):
    """robust.py starts no round that a round as long as the longest so far
    would carry past --deadline, and says how many rounds it ran."""

    def run_main(self, rounds, deadline, child_seconds, extra=()):
        clock = [1000.0]
        self.children = []

        def fake_child(item, shim, paired_in_process=False, stats=True, shim_env=None):
            clock[0] += child_seconds
            self.children.append((paired_in_process, stats, shim_env))
            result = {"mlp": {"sha256": "ab", "ms": 2.0 if shim else 1.0}}
            if paired_in_process:
                result["mlp"]["shim"] = {"observed_over_paused": 1.004, "host_observed_over_paused": 1.02,
                                         "pairs": 3, "iters": 1, "pair_ratios": [1.0, 1.004, 1.01],
                                         "host_pair_ratios": [1.01, 1.02, 1.03],
                                         "sum_observed_over_paused": 1.005, "paused_same_bits": True}
                if stats:
                    result["mlp"]["shim"]["own_share_observed"] = 0.0031
            return {"rc": 0, "seconds": child_seconds, "result": result}

        written = {}

        def fake_write(gpu, name, doc, lines):
            written.update(doc=doc, lines=lines)

        torch = types.SimpleNamespace(__version__="stub", cuda=types.SimpleNamespace(is_available=lambda: False))
        import robust
        argv = ["robust.py", "--items", "workloads", "--rounds", str(rounds), "--deadline", str(deadline), *extra]
        with mock.patch.dict(sys.modules, {"torch": torch}), mock.patch.object(sys, "argv", argv), \
                mock.patch.object(robust, "run_child", fake_child), \
                mock.patch.object(robust.time, "time", lambda: clock[0]), \
                mock.patch.object(shimstats, "write_evidence", fake_write):
            rc = robust.main()
        return rc, written

    def test_stops_before_a_round_that_would_outrun(self):
        rc, w = self.run_main(rounds=5, deadline=650, child_seconds=100)  # 300 s a round: arms A, S, P
        self.assertEqual(rc, 0)
        self.assertEqual(w["doc"]["items"]["workloads"]["rounds_done"], 2)
        self.assertEqual(len(w["doc"]["items"]["workloads"]["runs"]["A"]), 2)
        self.assertIn("(stopped after 2 of 5 rounds: --deadline 650 s)\n", w["lines"])

    def test_reports_arm_n_beside_p(self):
        rc, w = self.run_main(rounds=2, deadline=1000, child_seconds=10, extra=("--workload-arms", "A,P,N,Q"))
        self.assertEqual(rc, 0)
        over = w["doc"]["items"]["workloads"]["overhead"]["mlp"]
        self.assertEqual(over["learn_off"]["rounds"], [1.004] * 2)
        self.assertEqual(over["learn_off"]["pooled_pairs"]["n"], 6)
        self.assertTrue(any("arm N (learning off), observed over paused: 1.0040; 6 pooled: 1.0040" in line
                            for line in w["lines"]))
        # each round: A, P without stats, N without stats and with learning off, Q with stats
        self.assertEqual(sorted(map(str, self.children[:4])),
                         sorted(map(str, [(False, True, {}), (True, False, {}), (True, False, {"H3SHIM_LEARN": "0"}),
                                          (True, True, {})])))

    def test_reports_the_paired_loops_of_arm_p(self):
        rc, w = self.run_main(rounds=3, deadline=1000, child_seconds=10)
        over = w["doc"]["items"]["workloads"]["overhead"]["mlp"]
        self.assertEqual(over["observed_over_paused_rounds"], [1.004] * 3)
        self.assertTrue(any("wall 1.0040, host dispatch 1.0200" in line for line in w["lines"]))
        self.assertNotIn("q_rounds", over)
        self.assertEqual(over["pooled_pairs"]["n"], 9)
        self.assertAlmostEqual(over["pooled_pairs"]["median"], 1.004)
        self.assertTrue(any("all 9 pairs pooled: 1.0040 (95% interval 1.0000-1.0100) (1 iterations a loop; each "
                            "round's observed time over paused, summed: 1.0050, 1.0050, 1.0050); host dispatch alone, "
                            "pooled: 1.0200 (1.0100-1.0300)" in line for line in w["lines"]), w["lines"])
        self.assertEqual(over["pooled_host_pairs"]["n"], 9)

    def test_runs_arm_p_alone(self):
        rc, w = self.run_main(rounds=2, deadline=1000, child_seconds=10, extra=("--workload-arms", "P"))
        self.assertEqual(rc, 0)
        self.assertEqual(list(w["doc"]["items"]["workloads"]["runs"]), ["P"])
        self.assertEqual(w["doc"]["items"]["workloads"]["overhead"]["mlp"]["observed_over_paused_rounds"], [1.004] * 2)

    def test_reports_arm_q_beside_the_own_time(self):
        rc, w = self.run_main(rounds=2, deadline=1000, child_seconds=10, extra=("--workload-arms", "A,P,Q"))
        self.assertEqual(len(w["doc"]["items"]["workloads"]["runs"]["Q"]), 2)
        self.assertTrue(any("1.0040 against 0.31%, 1.0040 against 0.31%" in line for line in w["lines"]))

    def test_runs_every_round_within_the_deadline(self):
        rc, w = self.run_main(rounds=3, deadline=1000, child_seconds=100)
        self.assertEqual(w["doc"]["items"]["workloads"]["rounds_done"], 3)
        self.assertFalse(any("stopped after" in line for line in w["lines"]))

    def test_always_runs_one_round(self):
        rc, w = self.run_main(rounds=3, deadline=10, child_seconds=100)
        self.assertEqual(w["doc"]["items"]["workloads"]["rounds_done"], 1)


class RobustImplementations(unittest.TestCase):
    """robust.py's implementations item: one child per group of block_impls.GROUPS in each of
    arms A, S and L (L with an empty signature directory); any differing hash fails the item;
    what each implementation's own shape fused is read from the stats lines."""

    def run_main(self, differ=None):
        import block_impls
        self.children = []

        def fake_child(item, shim, paired_in_process=False, stats=True, shim_env=None, child_env=None):
            group = int(child_env["H3_ROBUST_IMPL_GROUP"])
            self.children.append((shim is not None, shim_env, group))
            arm = "A" if shim is None else "L" if shim_env.get("H3SHIM_SIGNATURES") else "S"
            names = block_impls.GROUPS[group]
            result = {f"{n}/serving/own_shape": "h-" + n for n in names}
            if differ and arm == differ[0]:
                result[f"{differ[1]}/serving/own_shape"] = "other bits"
            result["tokens_of"] = {n: 300 + group * 10 + i for i, n in enumerate(names)}
            stats_lines = [f"h3shim: 7 stats: signature learned/block-learned-1-42calls-n{300 + group * 10}: "
                           f"12 complete, 1 broken (first break: foreign at call 23)",
                           f"h3shim: 7 stats: plan learned/block-learned-1-42calls-n{300 + group * 10}: "
                           f"op swiglu takes calls 36,37,38"] if arm != "A" else []
            return {"rc": 0, "seconds": 1, "result": result, "shim_stats": stats_lines}

        written = {}

        def fake_write(gpu, name, doc, lines):
            written.update(doc=doc, lines=lines)

        torch = types.SimpleNamespace(__version__="stub", cuda=types.SimpleNamespace(is_available=lambda: False))
        import robust
        argv = ["robust.py", "--items", "implementations", "--rounds", "1"]
        with mock.patch.dict(sys.modules, {"torch": torch}), mock.patch.object(sys, "argv", argv), \
                mock.patch.object(robust, "run_child", fake_child), \
                mock.patch.object(shimstats, "write_evidence", fake_write):
            rc = robust.main()
        return rc, written

    def test_every_group_in_every_arm(self):
        import block_impls
        rc, w = self.run_main()
        self.assertEqual(rc, 0)
        self.assertEqual(len(self.children), 3 * len(block_impls.GROUPS))
        learned = [env for shim, env, _ in self.children if shim and env.get("H3SHIM_SIGNATURES")]
        self.assertEqual(len(learned), len(block_impls.GROUPS))
        self.assertTrue(all(os.path.isdir(env["H3SHIM_SIGNATURES"]) and not os.listdir(env["H3SHIM_SIGNATURES"])
                            for env in learned))
        fused = w["doc"]["items"]["implementations"]["fused_at_own_shape"]
        first = block_impls.GROUPS[1][0]
        self.assertEqual(fused["L"][first], {"complete": 12, "broken": 1, "ops": ["swiglu"]})
        self.assertEqual(fused["S"][block_impls.GROUPS[1][1]], {"complete": 0, "broken": 0, "ops": []})
        self.assertTrue(any(f"{first} (12 blocks fused, 1 broken, ops swiglu)" in line for line in w["lines"]))

    def test_a_differing_hash_in_the_learned_arm_fails(self):
        import block_impls
        rc, w = self.run_main(differ=("L", block_impls.GROUPS[2][3]))
        self.assertEqual(rc, 1)
        self.assertFalse(w["doc"]["items"]["implementations"]["pass"])
        self.assertTrue(any(line.startswith(f"- {block_impls.GROUPS[2][3]}/serving/own_shape: DIFFERS")
                            for line in w["lines"]))


class MedianInterval(unittest.TestCase):
    """shimstats.median_interval: what a few noisy rounds settle."""

    def test_the_median_lies_in_its_interval(self):
        med, lo, hi = shimstats.median_interval([1.461, 0.617, 0.843, 0.862])
        self.assertAlmostEqual(med, 0.8525)
        self.assertTrue(0.617 <= lo <= med <= hi <= 1.461)

    def test_few_noisy_rounds_leave_a_wide_interval_and_many_steady_ones_a_narrow_one(self):
        _, lo, hi = shimstats.median_interval([1.461, 0.617, 0.843, 0.862])
        _, lo2, hi2 = shimstats.median_interval([0.85 + 0.001 * (i % 5) for i in range(40)])
        self.assertGreater(hi - lo, 0.2)
        self.assertLess(hi2 - lo2, 0.01)

    def test_reproducible_and_empty(self):
        self.assertEqual(shimstats.median_interval([3, 1, 2]), shimstats.median_interval([3, 1, 2]))
        self.assertEqual(shimstats.median_interval([]), (None, None, None))


H1, H2 = "a" * 64, "b" * 64


def arm(outputs, rc=0, info=None):
    """A run of one soundness.py case as run_child returns it."""
    return {"rc": rc, "seconds": 1.0, "result": {"outputs": outputs, "info": info or {}}}


class SoundnessVerdict(unittest.TestCase):
    """soundness.verdict: a case passes only when both arms exit 0 and every output is the same."""

    def setUp(self):
        import soundness
        self.s = soundness

    def test_equal_outputs_pass(self):
        ok, findings, nondet = self.s.verdict(arm({"tile0": H1, "capture": "ok"}), arm({"tile0": H1, "capture": "ok"}))
        self.assertTrue(ok, findings)
        self.assertEqual(nondet, [])

    def test_a_hash_that_differs_fails(self):
        ok, findings, _ = self.s.verdict(arm({"tile0": H1, "tile1": H1}), arm({"tile0": H1, "tile1": H2}))
        self.assertFalse(ok)
        self.assertEqual(findings, [f"tile1: {H1[:16]} without the shim, {H2[:16]} with it"])

    def test_an_exception_only_with_the_shim_fails(self):
        err = "raised RuntimeError: CUDA error: an illegal memory access was encountered"
        ok, findings, _ = self.s.verdict(arm({"replay_after": H1}), arm({"replay_after": err}))
        self.assertFalse(ok)
        self.assertIn(err, findings[0])

    def test_the_same_exception_in_both_arms_is_equal_behaviour(self):
        err = self.s.raised(RuntimeError("CUDA error: operation not permitted when stream is capturing"))
        ok, findings, _ = self.s.verdict(arm({"capture": err}), arm({"capture": err}))
        self.assertTrue(ok, findings)

    def test_an_exit_code_or_a_missing_result_fails(self):
        self.assertFalse(self.s.verdict(arm({"x": H1}), arm({"x": H1}, rc=-11))[0])
        crashed = {"rc": -6, "seconds": 1.0, "error": "no JSON line on stdout"}
        ok, findings, _ = self.s.verdict(arm({"x": H1}), crashed)
        self.assertFalse(ok)
        self.assertIn("arm S printed no result", findings)
        self.assertFalse(self.s.verdict(crashed, arm({"x": H1}))[0])  # nothing to compare against

    def test_an_output_in_one_arm_only_fails(self):
        ok, findings, _ = self.s.verdict(arm({"a": H1}), arm({"a": H1, "b": H2}))
        self.assertFalse(ok)
        self.assertTrue(findings[0].startswith("b: only in arm S"))

    def test_repeats_that_differ_without_the_shim_are_left_out(self):
        base = arm({"forward": {"repeats": [H1, H1]}, "grad.w": {"repeats": [H1, H2]}})
        ok, findings, nondet = self.s.verdict(base, arm({"forward": {"repeats": [H1, H1]},
                                                         "grad.w": {"repeats": [H2, H2]}}))
        self.assertTrue(ok, findings)
        self.assertEqual(nondet, ["grad.w"])

    def test_repeatable_outputs_must_repeat_with_the_shim(self):
        base = arm({"forward": {"repeats": [H1, H1]}})
        self.assertFalse(self.s.verdict(base, arm({"forward": {"repeats": [H1, H2]}}))[0])

    def test_raised_blanks_numbers_and_addresses(self):
        a = self.s.raised(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB at 0x7f00ab\nmore"))
        b = self.s.raised(RuntimeError("CUDA out of memory. Tried to allocate 3.50 GiB at 0x7f11cd"))
        self.assertEqual(a, b)
        self.assertEqual(a, "raised RuntimeError: CUDA out of memory. Tried to allocate #.# GiB at #")

    def test_cases_by_number_or_name(self):
        self.assertEqual(self.s.pick_cases("0,model_swap,7"), ["serving", "model_swap", "inference_cast_fresh"])
        with self.assertRaises(ValueError):
            self.s.pick_cases("8")


class SoundnessMain(unittest.TestCase):
    """soundness.main: arm A runs first, model_swap's arm S allocates arm A's size, and the
    exit status is 0 only when every case passes."""

    def run_main(self, shim_outputs):
        import soundness
        calls, written = [], {}

        def fake_child(case, shim, env_extra=None):
            calls.append((case, shim, dict(env_extra or {})))
            if case == "model_swap":
                return arm({"big_alloc": "ok"}, info={"alloc_bytes": 123, "free_bytes": 2**31, "gpu": "NVIDIA H200"})
            return arm(shim_outputs if shim else {"tile0": H1}, info={"gpu": "NVIDIA H200", "torch": "stub"})

        def fake_write(gpu, name, doc, lines):
            written.update(gpu=gpu, name=name, doc=doc, lines=lines)

        with mock.patch.object(soundness, "run_child", fake_child), \
                mock.patch.object(shimstats, "write_evidence", fake_write):
            rc = soundness.main(["--cases", "model_swap,inference_cast_fresh", "--shim", __file__])
        return rc, calls, written

    def test_pass_and_the_size_handed_to_the_shim_arm(self):
        rc, calls, w = self.run_main({"tile0": H1})
        self.assertEqual(rc, 0)
        self.assertEqual(calls[0], ("model_swap", None, {}))
        self.assertEqual(calls[1][0], "model_swap")
        self.assertEqual(calls[1][2], {"H3_SOUNDNESS_ALLOC_BYTES": "123"})
        self.assertEqual(w["gpu"], "NVIDIA H200")
        self.assertEqual(w["name"], "soundness")
        self.assertTrue(w["doc"]["pass"])
        self.assertEqual(w["lines"][-1], "Result: pass")

    def test_a_difference_fails_the_run(self):
        rc, _, w = self.run_main({"tile0": H2})
        self.assertEqual(rc, 1)
        self.assertFalse(w["doc"]["cases"]["inference_cast_fresh"]["pass"])
        self.assertTrue(w["doc"]["cases"]["model_swap"]["pass"])
        self.assertIn("## 7 inference_cast_fresh: FAIL\n", w["lines"])

    def test_no_shim_library_is_a_usage_error(self):
        import soundness
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(soundness.main(["--shim", "/nonexistent/libh3shim.so"]), 2)


def shape(tokens, batch, ok=True):
    """One shape of a learn_shapes.py child's result."""
    return {"tokens": tokens, "batch": batch, "grid": [1, 16, 16], "bitwise_ok": ok, "differing_max": 0 if ok else 7,
            "ms_per_block_paused": 1.0, "ms_per_block_observed": 0.8, "ratio_paused_over_observed": 1.25,
            "pause_refused": False, "runs": [{"ms_per_block": 0.9, "differing": 0, "observed_calls": 400}]}


class LearnShapes(unittest.TestCase):
    """learn_shapes.py: its token grids, the children's results merged, the exit status (0 only when every
    shape asked for is bitwise equal to its reference) and the stats lines read from a child's stderr."""

    def setUp(self):
        import tempfile
        import learn_shapes
        self.ls = learn_shapes
        self.tmp = tempfile.TemporaryDirectory()
        self.env = mock.patch.dict(os.environ, {"H3SHIM_SIGNATURES": self.tmp.name, "LD_PRELOAD": ""})
        self.env.start()

    def tearDown(self):
        self.env.stop()
        self.tmp.cleanup()

    def run_main(self, results, extra=()):
        calls, out = [], os.path.join(self.tmp.name, "doc.json")

        def fake_child(a, env, tokens, batches):
            calls.append((tokens, batches, env["LD_PRELOAD"], env["H3SHIM_STATS"]))
            result = results(tokens, batches)
            learned = [{"group": "block-learned-1-42calls-n522", "calls": 42, "rows": 522, "complete": 21, "broken": 0}]
            return {"rc": 0, "seconds": 1.0, "result": result, "stats_lines": ["h3shim: 9 stats: signature x"],
                    "stats": {}, "learned": {"groups": 1, "refused": 0}, "learned_signatures": learned}

        stdout = io.StringIO()
        with mock.patch.object(self.ls, "run_child", fake_child), contextlib.redirect_stdout(stdout), \
                contextlib.redirect_stderr(io.StringIO()):
            rc = self.ls.main(["--tokens", "261,1797", "--batches", "1,2", "--shim", __file__, "--out", out, *extra])
        import json
        with open(out) as f:
            return rc, calls, json.load(f), stdout.getvalue()

    @staticmethod
    def every(tokens, batches):
        return {"environment": {"gpu": "NVIDIA H200"}, "shapes": [shape(t, b) for t in tokens for b in batches]}

    def test_grids(self):
        self.assertEqual(self.ls.grid_for(261), (1, 16, 16))
        self.assertEqual(self.ls.grid_for(1349), (7, 16, 12))
        self.assertEqual(self.ls.grid_for(1797), (7, 16, 16))
        for tokens in (6, 69, 1801, 2000):
            t, h, w = self.ls.grid_for(tokens)
            self.assertEqual(t * h * w + 5, tokens)

    def test_a_watched_shapes_clock_and_power(self):
        s = shape(1797, 1)
        self.assertEqual(self.ls.clock(s), "-")
        s["gpu_state_unfused"] = {"sm_clock_mhz": 1980.0, "power_w": 650.2, "clock_event_reasons": "0x0"}
        s["gpu_state_fused"] = {"error": "no readings"}
        self.assertEqual(self.ls.clock(s), "-")
        s["gpu_state_fused"] = {"sm_clock_mhz": 1672.5, "power_w": 690.0, "clock_event_reasons": "0x4"}
        self.assertEqual(self.ls.clock(s), "1980 MHz 650 W 0x0 / 1672 MHz 690 W 0x4")
        self.assertEqual(self.ls.energy(s), "-")
        s.update(energy_mj_per_block_unfused=0.6, energy_mj_per_block_fused=0.0)
        self.assertEqual(self.ls.energy(s), "-")

    def test_nvml_readings(self):
        self.assertEqual(self.ls.nvml_state([]), {})
        self.assertEqual(self.ls.nvml_state([(None, None), (None, 4)]), {})
        self.assertEqual(self.ls.nvml_state([(1980, 0), (1700, 4), (1800, None)]),
                         {"samples": 3, "sm_clock_mhz": 1800, "clock_event_reasons": "0x4"})

    def test_every_shape_equal_passes_in_one_child(self):
        rc, calls, doc, text = self.run_main(self.every)
        self.assertEqual(rc, 0)
        self.assertEqual(calls, [([261, 1797], [1, 2], os.path.abspath(__file__), "1")])
        self.assertTrue(doc["pass"])
        self.assertEqual(len(doc["shapes"]), 4)
        self.assertIn("| 261 | 1 | 1x16x16 | equal | - | - | - | - | - | - / - | - | - | 1.0000 | 0.8000 | 1.250 | pairs "
                      "| 0.9000 | 400 | - |", text)
        self.assertIn("| 261 | 2 | 1x16x16 | equal | - | - | - | - | - | - / - | - | - | 1.0000 | 0.8000 | 1.250 | pairs "
                      "| 0.9000 | 400 | 21 (0) |", text)
        self.assertIn("Spaced: the same replays, each after 20 ms of idle GPU", text)
        self.assertIn("1 groups learned, 0 refused", text)

    def test_spaced_replays_have_columns_and_no_sentence_when_off(self):
        def spaced(tokens, batches):
            doc = self.every(tokens, batches)
            doc["shapes"][0].update(gpu_ms_per_block_unfused_spaced=0.9, gpu_ms_per_block_fused_spaced=0.5,
                                    gpu_ratio_spaced=1.8,
                                    gpu_state_unfused_spaced={"samples": 20, "sm_clock_mhz": 1980,
                                                              "clock_event_reasons": "0x0"},
                                    gpu_state_fused_spaced={"samples": 20, "sm_clock_mhz": 1965.0,
                                                            "clock_event_reasons": "0x0"})
            doc["shapes"][1].update(energy_mj_per_block_unfused=0.62, energy_mj_per_block_fused=0.4)
            return doc
        rc, _, doc, text = self.run_main(spaced)
        self.assertEqual(rc, 0)
        self.assertEqual(doc["config"]["space_ms"], 20.0)
        self.assertIn("| - | - | - | 0.9000 / 0.5000 | 1.800 | 1980 MHz 0x0 / 1965 MHz 0x0 | 1.0000 |", text)
        self.assertIn("| - | - | 0.620 / 0.400 (1.550) | - / - | - | - | 1.0000 |", text)
        header, rule = [ln for ln in text.splitlines() if ln.startswith("| tokens") or ln.startswith("|---")]
        row = next(ln for ln in text.splitlines() if ln.startswith("| 261 | 1 "))
        self.assertEqual(header.count("|"), rule.count("|"))
        self.assertEqual(header.count("|"), row.count("|"))
        _, _, doc, text = self.run_main(self.every, ["--space-ms", "0"])
        self.assertEqual(doc["config"]["space_ms"], 0.0)
        self.assertNotIn("Spaced:", text)

    def test_a_bitwise_difference_fails(self):
        def one_differs(tokens, batches):
            doc = self.every(tokens, batches)
            doc["shapes"][3] = shape(1797, 2, ok=False)
            return doc
        rc, _, doc, text = self.run_main(one_differs)
        self.assertEqual(rc, 1)
        self.assertFalse(doc["pass"])
        self.assertIn("DIFFERS (7 elements at most)", text)

    def test_a_missing_shape_fails(self):
        rc, _, doc, _ = self.run_main(lambda t, b: {"shapes": [shape(261, 1)]})
        self.assertEqual(rc, 1)
        self.assertEqual(doc["missing_shapes"], [[261, 2], [1797, 1], [1797, 2]])

    def test_one_child_a_shape(self):
        rc, calls, doc, _ = self.run_main(self.every, ["--process-per-shape"])
        self.assertEqual(rc, 0)
        self.assertEqual([c[:2] for c in calls], [([261], [1]), ([261], [2]), ([1797], [1]), ([1797], [2])])
        self.assertEqual(doc["shapes"][0]["stats_lines"], ["h3shim: 9 stats: signature x"])

    def test_no_shim_or_a_refused_pause_is_a_usage_error(self):
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(self.ls.main(["--shim", "/nonexistent/libh3shim.so"]), 2)
        with mock.patch.object(self.ls, "run_child", lambda *a: {"rc": 2, "seconds": 1, "result": {
                "usage_error": "h3shim_pause(1) refused"}}), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(self.ls.main(["--shim", __file__]), 2)

    def test_the_child_stats_lines(self):
        stderr = "\n".join([
            '  File "tests/gpu/learn_shapes.py", line 1, in <module>',
            "h3shim: 9 WARN a learned signature did not parse (x); nothing learned",
            "h3shim: 9 stats: api                      calls errors",
            "h3shim: 9 stats: cuLaunchKernel            4000      0",
            "h3shim: 9 stats: learn: 2 groups learned, 1 refused (40 calls back on the idle path); 1 threads looked",
            "h3shim: 9 stats: signature learned/block-learned-1-42calls-n261: 21 complete, 0 broken",
            "h3shim: 9 stats: signature learned/block-learned-2-42calls-n522: 5 complete, 1 broken",
            "h3shim: 9 stats: op swiglu       21 groups run (42 calls)"])
        done = types.SimpleNamespace(returncode=0, stdout='{"shapes": []}\n', stderr=stderr)
        a = types.SimpleNamespace(blocks=8, runs=3, pairs=20, mode="inference", seed=0, timeout=60, clock_seconds=1.5,
                                  space_ms=20.0)
        argv = []
        with mock.patch.object(self.ls.subprocess, "run", lambda cmd, **k: argv.extend(cmd) or done), \
                contextlib.redirect_stderr(io.StringIO()):
            c = self.ls.run_child(a, {}, [261], [1, 2])
        self.assertEqual(argv[argv.index("--space-ms") + 1], "20.0")
        self.assertEqual(c["result"], {"shapes": []})
        self.assertEqual(c["stats_lines"], [stderr.splitlines()[1]] + stderr.splitlines()[4:])
        self.assertEqual(c["stats"]["ops"], {"swiglu": (21, 42)})
        self.assertEqual(c["learned"], {"groups": 2, "refused": 1})
        self.assertEqual([(g["rows"], g["complete"], g["broken"]) for g in c["learned_signatures"]],
                         [(261, 21, 0), (522, 5, 1)])


class Validate(unittest.TestCase):
    """tests/gpu/validate.py's flow with every subprocess stubbed: the steps in order, each script given the
    shim, a failing step failing the report, a step over the budget skipped."""

    def setUp(self):
        import validate
        self.v = validate

    def run_with(self, failing=(), budget=570):
        calls = []

        def fake_run(argv, **kw):
            calls.append(argv)
            if argv[1].endswith("worker.py"):
                out = '{"kind": "env", "gpu": "NVIDIA H200", "sm": 90, "driver": "580", "torch": "2.11"}\n'
                return types.SimpleNamespace(returncode=0, stdout=out, stderr="")
            if argv[1] == "-c":
                return types.SimpleNamespace(returncode=0, stdout="3.5\n", stderr="")
            rc = 1 if any(f in argv[1] for f in failing) else 0
            return types.SimpleNamespace(returncode=rc, stdout="Result: pass\n", stderr="")

        written = {}
        with mock.patch.object(self.v.subprocess, "run", fake_run), \
                mock.patch.object(self.v.os.path, "exists", lambda p: True), \
                mock.patch.object(self.v.shimstats, "write_evidence",
                                  lambda gpu, name, doc, lines: written.update(gpu=gpu, name=name, doc=doc,
                                                                               lines=lines)):
            rc = self.v.main(["--budget", str(budget)])
        return rc, calls, written

    def test_every_step_in_order_and_a_pass(self):
        rc, calls, written = self.run_with()
        self.assertEqual(rc, 0)
        names = [s["name"] for s in written["doc"]["steps"]]
        self.assertEqual(names, [f"kernel-{t}" for t in self.v.KERNEL_TESTS] + ["shapes", "decode", "variants", "op-latency"])
        scripts = [c for c in calls if c[1].endswith(".py") and not c[1].endswith("worker.py")]
        self.assertTrue(all("--shim" in c for c in scripts if "test_" not in c[1]))
        self.assertEqual(written["doc"]["versions"]["triton"], "3.5")
        self.assertIn("Result: pass", "\n".join(written["lines"]))

    def test_a_failing_kernel_test_fails_the_report(self):
        rc, _, written = self.run_with(failing=("test_swiglu",))
        self.assertEqual(rc, 1)
        self.assertIn("| kernel-swiglu | FAIL (exit 1) |", "\n".join(written["lines"]))

    def test_steps_over_the_budget_are_skipped(self):
        rc, _, written = self.run_with(budget=150)
        self.assertEqual(rc, 1)
        self.assertTrue(all(s.get("skipped") for s in written["doc"]["steps"]))


if __name__ == "__main__":
    unittest.main()
