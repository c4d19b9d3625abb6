"""Mutation score of the test suite on a curated list of plausible bugs (a benchmark, not a test).

Run from the repo root: ``python benchmarks/mutants.py [--only ID ...] [--list] [--keep]``.

Each entry of :data:`MUTANTS` is one bug someone could plausibly write: a file, an exact piece of
its text, what it becomes, and the test files (or single tests, ``file::name``) that should notice.
The harness

1. checks that every mutant's old text occurs exactly once in its file (otherwise it stops before
   running anything: a list that no longer matches the code must be updated, not silently skipped);
2. copies the working tree to a temporary folder with a plain file copy (every file but what
   ``.gitignore`` ignores and ``.git`` itself: a git checkout's tracked and untracked files, and
   the same from a tree that is not a checkout, e.g. an unpacked archive, where git has nothing to
   list) and checks that ``import engine`` there resolves to the copy (cwd and PYTHONPATH are the
   copy, so the editable install of the repo is shadowed);
3. runs each distinct set of test files once on the unmutated copy; tests that already fail there
   are reported and deselected from the mutant runs (a red baseline would "kill" every mutant);
4. applies one mutant at a time, runs ``python -m pytest -x -q <tests>`` in the copy, restores the
   file; a failing test kills the mutant (the first FAILED test is recorded), a green run means it
   survived; a run that cannot collect (exit code other than 0 or 1) is an error;
5. prints a Markdown table and the mutation score (killed / mutants). A mutant that names its
   ``killer`` (the hand-derived test meant to catch it) is reported "killed (by another test)"
   when a different test failed first, so the table says which test guards which number.

Why a hand-written list rather than mutmut or cosmic-ray: those generate every syntactic mutation
of every line (operators, constants, comparisons), thousands for engine/, each needing a test run;
on the 2-core development machine that is hours, and most of their mutants are noise (equivalent
mutants, or changes no engineer would make). The bugs that matter here are domain bugs that keep
the code running and the numbers plausible: a multiply-add counted once, a collective priced on the
wrong link, a KV element priced at the activation dtype. Each takes a few seconds to judge with
the tests that target it, so the whole list runs in a few minutes and says which test guards which
number.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 900


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    bug: str
    #: the test meant to kill it (``file::name``, its expectation hand-derived); "" where not named
    killer: str = ""


MUTANTS: tuple[Mutant, ...] = (
    # -- ops: FLOPs rules --------------------------------------------------------------------------
    Mutant("apply-no-2", "engine/language/ops/attention.py",
           "    return 2 * call.inputs[0].computed * call.inputs[1].axes[3].size",
           "    return call.inputs[0].computed * call.inputs[1].axes[3].size",
           ("tests/test_hand_attention.py",),
           "attention apply (probabilities x values) counted as 1 FLOP per multiply-add"),
    Mutant("causal-off-by-one", "engine/language/ops/attention.py",
           "            return n * (n + 1) / 2",
           "            return n * (n - 1) / 2",
           ("tests/test_hand_attention.py",),
           "causal pairs exclude the diagonal (a query does not see its own key)"),
    # -- sol: capacity ------------------------------------------------------------------------------
    Mutant("act-counts-weights", "engine/deploy/sol.py",
           "    out = ((traffic[keep] - weights[keep]) / repeat).max(axis=0)",
           "    out = (traffic[keep] / repeat).max(axis=0)",
           ("tests/test_hand_capacity.py",),
           "the prefill working set counts the kernel's weights (already resident)"),
    Mutant("fits-without-activations", "engine/deploy/rules.py",
           'ROOM = program(("room", _("usable") - _("weights") - _("reserve") - _("act")))',
           'ROOM = program(("room", _("usable") - _("weights") - _("reserve")))',
           ("tests/test_hand_capacity.py",),
           "fits ignores the prefill working set"),
    Mutant("steady-pages-unrounded", "engine/deploy/rules.py",
           '("paged_tokens", call("pw", (_("page_tokens") * (_ceil_sum(input_len + output_len - 1) - _ceil_sum(input_len - 1))\n'
           '                                 / call("max", output_len, 1.0), output_len > 0),',
           '("paged_tokens", call("pw", (input_len + call("max", output_len - 1, 0.0) / 2, output_len > 0),',
           ("tests/test_hand_steady_capacity.py",),
           "steady-state KV ignores paging: the mean context instead of whole pages",
           "tests/test_hand_steady_capacity.py::test_mean_paged_tokens_is_the_series_mean"),
    Mutant("mean-context-at-last-token", "engine/deploy/rules.py",
           '("mean_context", input_len + call("max", output_len - 1, 0.0) / 2),',
           '("mean_context", input_len + output_len),',
           ("tests/test_hand_steady_capacity.py",),
           "the steady TPOT priced at the last token again (the worst case)",
           "tests/test_hand_steady_capacity.py::test_mean_tpot_at_batch_one_reads_the_mean_context"),
    # the grid asks both capacities of a cell at once (sol.capacities), the sizing search one at a
    # time (sol.capacity): the same slip in each
    Mutant("steady-capacity-is-bytes", "engine/deploy/sol.py",
           "dp_attn * _steady_count(structure, room, steady[1])",
           "dp_attn * steady[1]",
           ("tests/test_hand_steady_capacity.py",),
           "the grid's steady capacity is a request's steady KV bytes, not the requests that fit",
           "tests/test_hand_steady_capacity.py::test_grid_keeps_and_fronts_the_steady_capacity"),
    Mutant("search-steady-capacity-is-worst-case", "engine/deploy/sol.py",
           "return structure.config.dp_attn * steady_fit(structure, room, input_len, output_len, kv_bytes)[2]",
           "return structure.config.dp_attn * _fit_count(room, kv_dev)",
           ("tests/test_hand_steady_capacity.py",),
           "capacity(steady=True), the sizing search's, returns the worst-case capacity (every request at "
           "its last position), not the steady state's: plan's batches end at 210 where 395 are served",
           "tests/test_hand_steady_capacity.py::test_the_sizing_search_serves_up_to_the_steady_capacity"),
    # -- parallel / placement: collectives ------------------------------------------------------------
    Mutant("all-scale-up", "engine/deploy/parallel.py",
           'return "scale_up" if self.span(groups) <= self.domain else "scale_out"',
           'return "scale_up"',
           ("tests/test_hand_comm.py",),
           "every collective priced on the scale-up link, multi-node included"),
    Mutant("ring-div-cp", "engine/deploy/placement_parallel.py",
           "(cp.expr - 1) * source.out_read",
           "(cp.expr - 1) / cp.expr * source.out_read",
           ("tests/test_hand_comm.py",),
           "ring context-parallel K/V bytes divided by cp"),
    Mutant("all-to-all-as-gather", "engine/deploy/placement_comm.py",
           'op, comm = "all_to_all", (g.expr - 1) / g.expr * step.out_read',
           'op, comm = "all_to_all", (g.expr - 1) * step.out_read',
           ("tests/test_hand_comm.py",),
           "an all-to-all (Ulysses) priced like an all-gather"),
    Mutant("all-reduce-1", "engine/deploy/placement_comm.py",
           'op, comm = "all_reduce", 2 * (n - 1) / n * wire',
           'op, comm = "all_reduce", 1 * wire',
           ("tests/test_hand_comm.py", "tests/test_deploy.py"),
           "all-reduce factor 2(n-1)/n replaced by 1"),
    Mutant("all-reduce-2", "engine/deploy/placement_comm.py",
           'op, comm = "all_reduce", 2 * (n - 1) / n * wire',
           'op, comm = "all_reduce", 2 * wire',
           ("tests/test_hand_comm.py", "tests/test_deploy.py"),
           "all-reduce factor 2(n-1)/n replaced by 2"),
    Mutant("reduce-scatter-as-all-reduce", "engine/deploy/placement_parallel.py",
           '"reduce_scatter", out, groups, (n - 1) / n * step.out_read, row)',
           '"reduce_scatter", out, groups, 2 * (n - 1) / n * step.out_read, row)',
           ("tests/test_hand_comm.py",),
           "the MoE combine's reduce-scatter priced as an all-reduce"),
    Mutant("all-gather-div-n", "engine/deploy/placement_comm.py",
           'op, comm = "all_gather", (g.expr - 1) * step.out_read',
           'op, comm = "all_gather", (g.expr - 1) / g.expr * step.out_read',
           ("tests/test_hand_comm.py",),
           "all-gather bytes divided by n (the local shard taken for the whole tensor)"),
    Mutant("fp8-kv-as-bf16", "engine/deploy/placement.py",
           'cache_bytes = self._own_cache_bytes.get(row.uid.removesuffix("@decode"), self.types.kv_bytes)',
           'cache_bytes = self._own_cache_bytes.get(row.uid.removesuffix("@decode"), self.types.act_bytes)',
           ("tests/test_hand_kv_traffic.py",),
           "cache reads priced at the activation dtype (FP8 KV traffic as BF16)"),
    # -- the expert all-to-all as DeepEP runs it (issue 38; hand tests in tests/test_expert_comm.py) ------
    Mutant("dispatch-at-bf16", "engine/deploy/expert_comm.py",
           "            return 1 + sympy.Rational(self.scale_bytes, self.scale_block)",
           "            return sympy.Integer(PAYLOAD_BYTES[\"bf16\"])",
           ("tests/test_expert_comm.py",),
           "DeepEP's FP8 dispatch (1 B + a 4 B scale per 128 elements) priced at BF16",
           killer="tests/test_expert_comm.py::test_prefill_node_limited_bytes_per_link"),
    Mutant("rdma-per-expert-not-per-node", "engine/deploy/expert_comm.py",
           'return {"scale_out": (N - 1) * p_node, "scale_up": (R - N) * p_gpu}',
           'return {"scale_out": sympy.Rational(k * (N - 1), N), "scale_up": (R - N) * p_gpu}',
           ("tests/test_expert_comm.py",),
           "normal kernels send a token over RDMA once per remote expert instead of once per destination node",
           killer="tests/test_expert_comm.py::test_prefill_node_limited_bytes_per_link"),
    # -- fusion ----------------------------------------------------------------------------------------
    Mutant("fused-writes-intermediates", "engine/deploy/fusion.py",
           "    writes = sympy.Add(*(s.written for s in members\n"
           "                         if not set(graph.consumers.get(s.uid, [])) <= inside or not graph.consumers.get(s.uid)))",
           "    writes = sympy.Add(*(s.written for s in members))",
           ("tests/test_hand_attention.py",),
           "a fused kernel writes its intermediates (flash attention's scores) to HBM"),
    # -- cost --------------------------------------------------------------------------------------------
    Mutant("memory-time-without-weights", "engine/deploy/compiled_totals.py",
           "tc, tm, tl, sol = roofline.times(f, b, c, latency,",
           "tc, tm, tl, sol = roofline.times(f, b - w, c, latency,",
           ("tests/test_hand_kv_traffic.py",),
           "phase memory time leaves out the weights read"),
    Mutant("roofline-without-latency", "engine/deploy/roofline.py",
           "        t_comm += latency\n",
           "",
           ("tests/test_roofline.py", "tests/test_hand_comm.py"),
           "the in-place roofline (every hot path) drops the collectives' per-call latency",
           "tests/test_roofline.py::test_hand_worked_steps_on_an_h100_like_gpu"),
    Mutant("roofline-sol-sums-terms", "engine/deploy/roofline.py",
           "t_sol = np.maximum(np.maximum(t_compute, t_memory, out=sol_out), t_comm, out=sol_out)",
           "t_sol = np.add(np.maximum(t_compute, t_memory, out=sol_out), t_comm, out=sol_out)",
           ("tests/test_roofline.py",),
           "a step's SOL adds its link time to its kernel time instead of taking the largest",
           "tests/test_roofline.py::test_hand_worked_steps_on_an_h100_like_gpu"),
    Mutant("bound-ties-to-memory", "engine/deploy/roofline.py",
           "compute = (t_compute >= t_memory) & (t_compute >= t_comm)",
           "compute = (t_compute > t_memory) & (t_compute >= t_comm)",
           ("tests/test_roofline.py",),
           "a step whose compute and memory times tie is called memory-bound in the phase's split",
           "tests/test_roofline.py::test_ties_go_to_compute_then_memory"),
    # -- storage / kv / deploy ----------------------------------------------------------------------------
    Mutant("stacked-experts-per-expert", "engine/language/storage.py",
           "count = row.repeat * (sympy.Integer(1) if row.stacked else row.instances)",
           "count = row.repeat * row.instances",
           ("tests/test_models.py",),
           "a stacked expert tensor (one per layer) counted once per expert"),
    Mutant("window-not-capped", "engine/language/kv.py",
           "        return remembered(_WINDOWS, (length, window), lambda: _window_min(length, window), 4096)",
           "        return length",
           ("tests/test_models.py",),
           "a sliding-window cache grows with the context"),
    Mutant("kv-not-split", "engine/deploy/stage_memory.py",
           "_mul(_div(_cache_bytes(cache), split), count)",
           "_mul(_cache_bytes(cache), count)",
           ("tests/test_deploy.py",),
           "per-GPU KV not divided by the cache's layout (KV heads under TP)"),
    Mutant("front-across-groups", "engine/serving/fronts.py",
           '.group_by(GRID_FRONT_KEY, maintain_order=True)',
           '.group_by(["gpu"], maintain_order=True)',
           ("tests/test_site_offgrid.py",),
           "deployments' on_front: one front per GPU type across frameworks, KV dtypes and lengths"),
    # -- the site: a display bug over a correct engine ---------------------------------------------------
    Mutant("page-kv-per-gpu", "static/js/deploy.js",
           "fmt.bytes(dec.kv_bytes_per_request)",
           "fmt.bytes(dec.kv_bytes_per_gpu)",
           ("tests/test_site_numbers.py",),
           "the deployment page shows the batch's KV per GPU as 'KV per request'"),
    Mutant("page-front-without-capacity", "engine/deploy/rules.py",
           '"add": [[_MOST, ["and", [">=", _MOST, 1], ["<", _MOST, "top"]]]], "else": [1]}',
           '"add": [], "else": [1]}',
           ("tests/test_site_offgrid.py", "tests/test_formula_tree.py"),
           "the grid's batch rule (which the deploy page's fronts read) leaves out each config's capacity point"),
    # -- issue 36: serving rules at the points where two readings differ (hand tests in
    #    tests/test_hand_serving.py and, for the browser copies, tests/test_hand_browser.py) ---------
    Mutant("mtp-every-module", "engine/deploy/planner.py",
           "repeat = s.repeat * k if layers is None else s.repeat * k / layers",
           "repeat = s.repeat * k",
           ("tests/test_hand_serving.py",),
           "a draft pass runs every MTP module instead of one (MiMo-V2-Flash: 3 modules)",
           "tests/test_hand_serving.py::test_a_draft_pass_runs_one_mtp_module"),
    # The pages run these rule programs themselves (formula.js evaluates engine/deploy/rules.py's and
    # engine/serving/rules.py's exports; sizing.js and deploy_eval.js keep no copy), so a bug planted
    # in a rule is the page's too: tests/test_hand_browser.py's hand tests of the DP-attention, NIC
    # and scale-up-domain rules fail on the same edits, and a second mutant for the page would plant
    # the same bug twice (check_texts refuses that).
    Mutant("dp-attn-even-decode", "engine/deploy/rules.py",
           '("program_batch", dp_attn * _("per_rank") / _("micro_batches")),',
           '("program_batch", batch / _("micro_batches")),',
           ("tests/test_hand_serving.py",),
           "the decode program runs at the batch spread evenly over DP-attention ranks, not whole requests",
           "tests/test_hand_serving.py::test_dp_attention_decode_holds_whole_requests_per_rank"),
    Mutant("dp-attn-even-requests", "engine/deploy/rules.py",
           '("per_rank", call("cdiv", batch, dp_attn)),',
           '("per_rank", batch / dp_attn),',
           ("tests/test_hand_serving.py",),
           "the fullest DP-attention rank holds batch / dp requests (a fraction) instead of ceil(batch / dp)",
           "tests/test_hand_serving.py::test_dp_attention_decode_holds_whole_requests_per_rank"),
    Mutant("disagg-faster-nic", "engine/serving/rules.py",
           '("out_bw", call("min", _("p_out_bw"), _("d_out_bw")))',
           '("out_bw", call("max", _("p_out_bw"), _("d_out_bw")))',
           ("tests/test_hand_serving.py",),
           "KV between two GPU types crosses the faster of the two NICs (H100 -> B300 at 100 GB/s)",
           "tests/test_hand_serving.py::test_kv_transfer_between_two_gpu_types_takes_the_slower_nic"),
    Mutant("disagg-domain-strict", "engine/serving/rules.py",
           '("on_up", call("and", _("has_up"), _("total_gpus") <= _("domain"))),',
           '("on_up", call("and", _("has_up"), _("total_gpus") < _("domain"))),',
           ("tests/test_hand_serving.py",),
           "pools filling exactly one scale-up domain (4 + 4 H100s) send the KV over the NIC",
           "tests/test_hand_serving.py::test_pools_filling_exactly_one_domain_stay_on_nvlink"),
    Mutant("group-domain-strict", "engine/deploy/parallel.py",
           'return "scale_up" if self.span(groups) <= self.domain else "scale_out"',
           'return "scale_up" if self.span(groups) < self.domain else "scale_out"',
           ("tests/test_hand_comm.py",),
           "a TP group exactly the size of the domain (TP 8 on an 8-GPU node) priced on the network",
           "tests/test_hand_comm.py::test_tp_all_reduce_link_and_time"),
    Mutant("sla-strict", "engine/serving/sizing.py",
           'ok = (p["ttft_s"] <= sla.ttft_s) & (p["tpot_s"] <= sla.tpot_s)',
           'ok = (p["ttft_s"] < sla.ttft_s) & (p["tpot_s"] < sla.tpot_s)',
           ("tests/test_hand_serving.py",),
           "a point meeting the TTFT and TPOT bounds exactly is refused",
           "tests/test_hand_serving.py::test_an_sla_met_exactly_is_met"),
    Mutant("disagg-sla-strict", "engine/serving/pairing.py",
           'points["meets_sla"] = (points["ttft_s"] <= sla.ttft_s) & (points["tpot_s"] <= sla.tpot_s)',
           'points["meets_sla"] = (points["ttft_s"] < sla.ttft_s) & (points["tpot_s"] < sla.tpot_s)',
           ("tests/test_hand_serving.py",),
           "a disaggregated split meeting the TTFT and TPOT bounds exactly is refused",
           "tests/test_hand_serving.py::test_a_disaggregated_split_meeting_the_bounds_exactly_is_met"),
    Mutant("sizing-gpus-inverted", "engine/serving/fronts.py",
           'None if gpus == "all" else tuple(gpus)',
           'None if gpus != "all" else tuple(gpus)',
           ("tests/test_fronts.py::test_default_grid_declares_the_issue_question",),
           "the grid's sizing.gpus list read as `all` (the weak test passed whenever gpus was None)",
           "tests/test_fronts.py::test_default_grid_declares_the_issue_question"),
    Mutant("tree-linear-levels", "engine/deploy/hardware.py",
           'math.log2(N) * far["tree"]',
           '(N - 1) * far["tree"]',
           ("tests/test_hand_serving.py",),
           "the tree all-reduce climbs N - 1 network levels instead of log2 N (differs past 2 nodes)",
           "tests/test_hand_serving.py::test_tree_all_reduce_latency_over_four_nodes"),
    Mutant("reserve-replica-is-tp", "engine/deploy/fusion_table.py",
           "if config.tp * config.pp * config.cp < self.min_replica_gpus:",
           "if config.tp < self.min_replica_gpus:",
           ("tests/test_hand_serving.py",),
           "a replica's GPUs counted as TP only: PP and CP replicas lose vLLM's collective buffers",
           "tests/test_hand_serving.py::test_runtime_reserve_under_pipeline_and_context_parallelism"),
    Mutant("reserve-per-tp", "engine/deploy/fusion_table.py",
           'return self.bytes * (config.tp * config.pp if self.per == "tp_pp" else 1)',
           'return self.bytes * (config.tp if self.per == "tp_pp" else 1)',
           ("tests/test_hand_serving.py",),
           "SGLang's parallel buffers scale with TP only, not TP x PP",
           "tests/test_hand_serving.py::test_runtime_reserve_under_pipeline_and_context_parallelism"),
    Mutant("front-counts-unfit", "engine/serving/fronts.py",
           '.filter((pl.col("phase") == "decode") & pl.col("fits_steady"))',
           '.filter(pl.col("phase") == "decode")',
           ("tests/test_hand_serving.py",),
           "deployments' on_front counts decode rows the steady state does not serve",
           "tests/test_hand_serving.py::test_grid_front_is_the_steady_states_and_ignores_rows_it_does_not_serve"),
    Mutant("front-served-worst-case", "engine/serving/fronts.py",
           '"phase", "fits_steady", "tpot_mean_s"',
           '"phase", pl.col("fits").alias("fits_steady"), "tpot_mean_s"',
           ("tests/test_hand_serving.py",),
           "deployments' on_front serves by the worst case (every request at its last token) again",
           "tests/test_hand_serving.py::test_grid_front_is_the_steady_states_and_ignores_rows_it_does_not_serve"),
    Mutant("front-last-token", "engine/serving/fronts.py",
           '"fits_steady", "tpot_mean_s", "batch"',
           '"fits_steady", pl.col("tpot_s").alias("tpot_mean_s"), "batch"',
           ("tests/test_hand_serving.py",),
           "deployments' on_front timed by the last token's TPOT (the worst case), not the steady one",
           "tests/test_hand_serving.py::test_grid_front_is_the_steady_states_and_ignores_rows_it_does_not_serve"),
    Mutant("grid-batches-worst-case", "engine/deploy/rules.py",
           '_MOST = ["max", "worst", "steady"]',
           '_MOST = "worst"',
           ("tests/test_hand_steady_capacity.py",),
           "the grid's batches cut at the worst-case capacity: the steady state's points past it missing",
           "tests/test_hand_steady_capacity.py::test_grid_keeps_and_fronts_the_steady_capacity"),
    Mutant("mod-as-fmod", "engine/language/formula_tree.py",
           "return v[0] - v[1] * math.floor(v[0] / v[1])",
           "return math.fmod(v[0], v[1])",
           ("tests/test_hand_serving.py",),
           "the formula tree's Mod truncates (C's fmod, JavaScript's %) instead of sympy's floor mod",
           "tests/test_hand_serving.py::test_formula_mod_is_floor_mod"),
    Mutant("js-mod-as-percent", "static/js/formula.js",
           'case "mod": return v[0] - v[1] * Math.floor(v[0] / v[1]);',
           'case "mod": return v[0] % v[1];',
           ("tests/test_hand_browser.py",),
           "formula.js's Mod as JavaScript's % (the sign of the dividend)",
           "tests/test_hand_browser.py::test_formula_js_mod_is_floor_mod"),
    Mutant("js-sla-strict", "static/js/sizing.js",
           "if (!(row.ttft_s <= a && row.tpot_s <= b)) continue;",
           "if (!(row.ttft_s < a && row.tpot_s < b)) continue;",
           ("tests/test_hand_browser.py",),
           "the sizing page refuses a split meeting the bounds exactly",
           "tests/test_hand_browser.py::test_sizing_js_a_split_meeting_the_bounds_exactly_is_an_answer"),
    Mutant("js-aggregated-sla-strict", "static/js/sizing.js",
           "if (r.ttft_s <= b.ttft && r.tpot_s <= b.tpot) { best = r; return true; }",
           "if (r.ttft_s < b.ttft && r.tpot_s < b.tpot) { best = r; return true; }",
           ("tests/test_hand_browser.py",),
           "the sizing page's aggregated answer skips a row meeting the bounds exactly",
           "tests/test_hand_browser.py::test_sizing_js_a_row_meeting_the_bounds_exactly_is_the_answer"),
    Mutant("js-front-counts-unfit", "static/js/deploy_eval.js",
           "if (!r.fits_steady) return;",
           "",
           ("tests/test_hand_browser.py",),
           "the deploy page's fronts count points that do not fit",
           "tests/test_hand_browser.py::test_deploy_eval_js_front_leaves_out_points_that_do_not_fit"),
    Mutant("js-front-worst-case", "static/js/deploy_eval.js",
           "if (!r.fits_steady) return;",
           "if (!r.fits) return;",
           ("tests/test_hand_browser.py",),
           "the deploy page's fronts serve by the worst case (every request at its last token) again",
           "tests/test_hand_browser.py::test_deploy_eval_js_front_serves_by_the_steady_state"),
    Mutant("js-select-add-ignores-condition", "static/js/formula.js",
           "if (!evaluate(pair[1], scope)) return;",
           "",
           ("tests/test_formula_tree.py",),
           "the browser's selection rule adds a value whose condition fails (a capacity of 0 or past the largest batch as a row)"),
    # -- benchmarks/published.py: published measurements beside the bound --------------------------
    Mutant("published-total-as-per-gpu", "benchmarks/published.py",
           'measured = row["measured"] if per_gpu_given else run[2] / row["gpus"]',
           'measured = row["measured"] if per_gpu_given else run[2]',
           ("tests/test_published_data.py",),
           "a TensorRT-LLM table's total output tok/s (over TP8) compared as tok/s per GPU",
           "tests/test_published_data.py::test_numbers_are_positive_and_derived_as_the_sources_say"),
    Mutant("published-output-without-prefill", "benchmarks/published.py",
           "    return batch * point.output_len / (ttft + point.output_len * tpot) / replica",
           "    return batch * point.output_len / (point.output_len * tpot) / replica",
           ("tests/test_published_data.py",),
           "an offline run's output tok/s priced without the prompts' prefill (a looser bound)",
           "tests/test_published_data.py::test_throughput_formulas_by_hand"),
    # -- sol: the two times per point (lower bound, schedule estimate) ------------------------------------
    Mutant("bound-ignores-memory", "engine/deploy/compiled_totals.py",
           '        busiest = np.maximum(sums["t_compute"], sums["t_memory"])',
           '        busiest = sums["t_compute"]',
           ("tests/test_phase_bound.py",),
           "the lower bound forgets HBM: memory-bound decode gets a bound far below what any schedule takes",
           "tests/test_phase_bound.py::test_decode_bound_is_the_weight_and_kv_read"),
    Mutant("overlap-one-stream", "engine/deploy/rules.py",
           'call("max", call("max", 2.0 * _("kernels"), 2.0 * _("half_comm")), _("full_bound"))',
           'call("max", 2.0 * _("kernels") + 2.0 * _("half_comm"), _("full_bound"))',
           ("tests/test_phase_bound.py",),
           "the two-batch schedule hides no collective (both halves one after another on one stream)",
           "tests/test_phase_bound.py::test_two_batch_decode_composes_the_half_batch"),
    Mutant("bound-serializes-links", "engine/deploy/compiled_totals.py",
           "            busiest = np.maximum(busiest, add_rows(rows, tl))",
           "            busiest = busiest + add_rows(rows, tl)",
           ("tests/test_published_bound.py",),
           "the lower bound allows no overlap of collectives with kernels: DeepSeek's published EP32 prefill beats it",
           "tests/test_published_bound.py::test_no_published_measurement_beats_the_lower_bound"),
    Mutant("steady-tpot-at-last-position", "engine/deploy/rules.py",
           '("mean_context", input_len + call("max", output_len - 1, 0.0) / 2),',
           '("mean_context", input_len + call("max", output_len - 1, 0.0)),',
           ("tests/test_published_bound.py",),
           "the steady decode step priced at the last position: TensorRT-LLM's Llama-3.1-8B 128/2048 beats the bound",
           "tests/test_published_bound.py::test_no_published_measurement_beats_the_lower_bound"),
    Mutant("js-bound-ignores-memory", "static/js/deploy_eval.js",
           't.step_bound_s = F.fold("max", [t.compute_time_s, t.memory_time_s].concat(',
           't.step_bound_s = F.fold("max", [t.compute_time_s].concat(',
           ("tests/test_site_offgrid.py",),
           "the deploy page's lower bound forgets HBM (memory-bound decode shows a bound below the CLI's)",
           "tests/test_site_offgrid.py::test_page_equals_archledger_deploy_off_grid"),
    # -- caches: per-entry storage dtype and state ------------------------------------------------------
    Mutant("cache-scale-dropped", "engine/language/dtypes.py",
           "    return own + sympy.Rational(CACHE_DTYPE_BYTES[scale[0]], int(scale[1]))",
           "    return own",
           ("tests/test_streams.py",),
           "a cache's block scales (the FP8 indexer key's f32 per 128) take no bytes",
           "tests/test_streams.py::test_dsa_kv_bytes_per_request"),
    Mutant("cache-own-dtype-ignored-on-read", "engine/deploy/placement.py",
           "        element = cache_bytes if op.cache_output else op.out_element_bytes or self.types.act_bytes",
           "        element = self.types.kv_bytes if op.cache_output else op.out_element_bytes or self.types.act_bytes",
           ("tests/test_streams.py",),
           "decode reads the FP8 indexer keys at the KV dtype (1.09 GiB at 64K, not 0.63)",
           "tests/test_streams.py::test_dsa_decode_reads_only_the_selected_rows"),
    Mutant("compressor-state-overlap-ignored", "engine/language/ops/attention.py",
           'Axis("compressor_rows", windows * call.dims["every"])',
           'Axis("compressor_rows", call.dims["every"])',
           ("tests/test_deepseek_v4.py",),
           "the compressor's state holds every rows, not 2 x every with CSA's overlapping windows",
           "tests/test_deepseek_v4.py::test_kv_bytes_per_request"),
    # -- measured kernels: the lookup's rule (Python) and its lookup node in the browser (issue 39) ----
    Mutant("lookup-linear", "engine/deploy/interpolation.py",
           "        frac[:, d] = (np.log(points[:, d]) - lv[i]) / (lv[i + 1] - lv[i])",
           "        frac[:, d] = (points[:, d] - v[i]) / (v[i + 1] - v[i])",
           ("tests/test_measured.py",),
           "measured tables interpolated linearly in the axis values, not in log space",
           "tests/test_measured.py::test_interpolation_hand_values"),
    Mutant("lookup-wrong-axis", "engine/deploy/interpolation.py",
           "        frac[:, d] = (np.log(points[:, d]) - lv[i]) / (lv[i + 1] - lv[i])",
           "        frac[:, d] = (np.log(points[:, axes - 1 - d]) - lv[i]) / (lv[i + 1] - lv[i])",
           ("tests/test_measured.py",),
           "each axis interpolated at another axis's coordinate",
           "tests/test_measured.py::test_interpolation_hand_values"),
    Mutant("gemm-fp8-reads-block-table", "engine/deploy/kernel_spec.py",
           '    if kernel == "gemm":\n        names = ("fp8", "fp8_block") if dtype == "fp8" else (dtype,)',
           '    if kernel == "gemm":\n        names = ("fp8_block", "fp8") if dtype == "fp8" else (dtype,)',
           ("tests/test_measured.py",),
           "an FP8 GEMM reads the 128-block table before the per-tensor one",
           "tests/test_measured.py::test_fp8_matmuls_read_the_fp8_table"),
    Mutant("js-lookup-linear", "static/js/formula.js",
           "(Math.log(p[d]) - Math.log(v[i])) / (Math.log(v[i + 1]) - Math.log(v[i]))",
           "(p[d] - v[i]) / (v[i + 1] - v[i])",
           ("tests/test_formula_tree.py",),
           "the browser's lookup node interpolates linearly, not in log space",
           "tests/test_formula_tree.py::test_lookup_node_hand_values_in_the_browser"),
    Mutant("js-lookup-wrong-axis", "static/js/formula.js",
           "(Math.log(p[d]) - Math.log(v[i])) / (Math.log(v[i + 1]) - Math.log(v[i]))",
           "(Math.log(p[n - 1 - d]) - Math.log(v[i])) / (Math.log(v[i + 1]) - Math.log(v[i]))",
           ("tests/test_formula_tree.py",),
           "the browser's lookup node interpolates each axis at another axis's coordinate",
           "tests/test_formula_tree.py::test_lookup_node_hand_values_in_the_browser"),
    Mutant("js-lookup-axis-order", "static/js/formula.js",
           "at = at * t.values[d].length + ",
           "at = at * t.values[n - 1 - d].length + ",
           ("tests/test_formula_tree.py",),
           "the browser reads a table's seconds in the wrong axis order",
           "tests/test_formula_tree.py::test_lookup_node_hand_values_in_the_browser"),
    Mutant("lookup-no-rate-floor", "engine/deploy/interpolation.py",
           "        log_t[outside] = np.maximum(log_t[outside], floor)",
           "        log_t[outside] = log_t[outside]",
           ("tests/test_measured.py",),
           "outside a table's range a kernel may grow more efficient than any point the table measured",
           "tests/test_measured.py::test_outside_the_range_continues_the_last_span"),
    Mutant("js-lookup-no-rate-floor", "static/js/formula.js",
           "if (out) logT = Math.max(logT, Math.log(roof(x)) - Math.log(t.rate || peakRate(t, roof)));",
           "",
           ("tests/test_formula_tree.py",),
           "the browser's lookup node lets an extrapolated kernel beat the table's best measured rate",
           "tests/test_formula_tree.py::test_lookup_node_floor_of_the_tables_best_rate_in_the_browser"),
    Mutant("js-lookup-ignores-carried-rate", "static/js/formula.js",
           "Math.log(t.rate || peakRate(t, roof))",
           "Math.log(peakRate(t, roof))",
           ("tests/test_formula_tree.py",),
           "the browser floors a distilled table at its own few points' rate, not its whole table's",
           "tests/test_formula_tree.py::test_lookup_node_floor_of_the_tables_best_rate_in_the_browser"),
    Mutant("bench-no-padding-cap", "benchmarks/trtllm_bench.py",
           "            if not out or out[-1] != cap:\n                out.append(cap)",
           "            pass",
           ("tests/test_trtllm_bench.py",),
           "trtllm-bench's executor captures no CUDA graph at its max batch when a listed size lies above it",
           "tests/test_trtllm_bench.py::test_captured_sizes_by_hand"),
    Mutant("bench-kv-heads-unpadded", "benchmarks/trtllm_bench.py",
           "2 * n_layers * max(tp, n_kv_heads) * d_head",
           "2 * n_layers * n_kv_heads * d_head",
           ("tests/test_trtllm_bench.py",),
           "trtllm-bench's KV estimate counts the model's KV heads, not at least one per TP rank",
           "tests/test_trtllm_bench.py::test_engine_setting_counts_one_kv_head_per_tensor_parallel_rank"),
    Mutant("js-expected-kv-dtype", "static/js/deploy_eval.js",
           "var ex = o.expected ? o.expected[o.kv_dtype] : null;",
           "var ex = o.expected ? o.expected.bf16 : null;",
           ("tests/test_site_offgrid.py",),
           "the deploy page's expected times read the BF16-KV attention tables whatever the KV dtype",
           "tests/test_site_offgrid.py::test_expected_times_off_grid_read_the_measured_tables"),
    Mutant("export-expected-kv-dtype", "engine/batch/deploy_export.py",
           'by_phase["expected"] = {kv_dtype: {p: [expected(built[c], p, gpu, framework, kv_dtype)',
           'by_phase["expected"] = {kv_dtype: {p: [expected(built[c], p, gpu, framework, "bf16")',
           ("tests/test_site_offgrid.py",),
           "the exported expected-time trees of every KV dtype read the BF16-KV attention tables",
           "tests/test_site_offgrid.py::test_expected_times_off_grid_read_the_measured_tables"),
    # -- op FLOPs, storage and the stored bounds (added 2026-12-07: areas no mutant reached) ------------
    Mutant("linear-mac-once", "engine/language/ops/dense.py",
           'flops = 2 * rows * call.dims["in"] * call.dims["out"]',
           'flops = rows * call.dims["in"] * call.dims["out"]',
           ("tests/test_deploy.py",),
           "a linear layer's multiply-add counted as one FLOP",
           "tests/test_deploy.py::test_llama_tp8_column_parallel_q_proj"),
    Mutant("delta-rule-no-update", "engine/language/ops/recurrent.py",
           "per_token = 7 * dk * dv + 2 * dv + 1",
           "per_token = 5 * dk * dv + 2 * dv + 1",
           ("tests/test_recurrent_ops.py",),
           "the recurrent gated delta rule's decode step leaves out the rank-1 state update",
           "tests/test_recurrent_ops.py::test_gated_delta_rule_flops_match_enumeration"),
    Mutant("mamba2-update-mac-once", "engine/language/ops/recurrent.py",
           "return per_call + b * h * s * (2 + nst + 5 * p * nst + 2 * p)",
           "return per_call + b * h * s * (2 + nst + 3 * p * nst + 2 * p)",
           ("tests/test_ssm_ops.py",),
           "the Mamba2 decode step counts the state update's multiply-add once",
           "tests/test_ssm_ops.py::test_mamba2_ssd_flops_match_enumeration"),
    Mutant("moe-combine-mac-once", "engine/language/ops/moe.py",
           'lambda c, out: 2 * c.inputs[0].numel, placement="combine"',
           'lambda c, out: c.inputs[0].numel, placement="combine"',
           ("tests/test_deploy.py",),
           "the MoE combine's weighted sum counts one FLOP per routed element",
           "tests/test_deploy.py::test_deepseek_combine_weighs_each_tokens_k_expert_outputs"),
    Mutant("bound-rounds-nearest", "engine/batch/schema.py",
           "stored = np.where(stored.astype(np.float64) > x, np.nextafter(stored, np.float32(-np.inf)), stored)",
           "stored = stored",
           ("tests/test_stored_precision.py",),
           "a stored lower bound rounded to the nearest float32, which can land above the bound",
           "tests/test_stored_precision.py::test_a_bound_whose_nearest_float32_is_above_it_is_stored_as_the_predecessor"),
    Mutant("nvfp4-scale-per-32", "corpus/quant/nvfp4.yaml",
           '{key: "{weight}_scale", dtype: F8_E4M3, shape: [rows, "cols / 16"]}',
           '{key: "{weight}_scale", dtype: F8_E4M3, shape: [rows, "cols / 32"]}',
           ("tests/test_storage.py",),
           "NVFP4 stores one FP8 scale per 32 elements (MXFP4's group) instead of 16",
           "tests/test_storage.py::test_nvfp4_layout_on_llama"),
    Mutant("disagg-ttft-no-transfer", "engine/serving/rules.py",
           '("ttft_s", _("ttft_p") + _("kv_transfer_s")),',
           '("ttft_s", _("ttft_p")),',
           ("tests/test_disagg.py",),
           "a disaggregated pair's TTFT leaves out the KV transfer between the pools",
           "tests/test_disagg.py::test_ttft_tpot_and_pool_ratio_by_hand"),
    Mutant("disagg-fractional-replicas", "engine/serving/rules.py",
           '("prefill_replicas", call("max", 1, call("ceil", _("demand") / _("x_p") * ROUND))),',
           '("prefill_replicas", call("max", 1, _("demand") / _("x_p"))),',
           ("tests/test_disagg.py",),
           "a fraction of a prefill replica (its GPUs priced pro rata)",
           "tests/test_disagg.py::test_ttft_tpot_and_pool_ratio_by_hand"),
    Mutant("disagg-rate-decode-gpus", "engine/serving/rules.py",
           '("tokens_per_s_per_gpu", _("tokens") / _("total_gpus")),',
           '("tokens_per_s_per_gpu", _("tokens") / (_("decode_replicas") * _("n_d"))),',
           ("tests/test_disagg.py",),
           "a disaggregated pair's tokens/s per GPU counts the decode pool's GPUs only",
           "tests/test_disagg.py::test_ttft_tpot_and_pool_ratio_by_hand"),
    Mutant("disagg-xd-tokens", "engine/serving/rules.py",
           'X_D = program(("x_d", _("batch_d") / (_("output") * _("tpot_d"))))',
           'X_D = program(("x_d", _("batch_d") / _("tpot_d")))',
           ("tests/test_disagg.py",),
           "a decode replica's request rate read as its token rate (output tokens per request forgotten)",
           "tests/test_disagg.py::test_transfer_time_by_hand_mla_latent_and_scale_up"),
    Mutant("stack-count-ignored", "engine/language/storage.py",
           "        return self.bytes * self.count",
           "        return self.bytes",
           ("tests/test_storage.py",),
           "a tensor stored once per layer (count) counted once",
           "tests/test_storage.py::test_every_parameter_is_stored_once"),
    Mutant("fp8-kv-two-bytes", "engine/language/kv.py",
           'KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}',
           'KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}',
           ("tests/test_hand_kv_traffic.py",),
           "an FP8 KV cache priced at two bytes per element",
           "tests/test_hand_kv_traffic.py::test_gqa_decode_attention_reads_the_history_at_the_cache_dtype"),
    Mutant("kv-heads-fraction", "engine/deploy/placement.py",
           "                return sympy.Min(value, product)",
           "                return product",
           ("tests/test_deploy.py",),
           "more TP ranks than KV heads split a head instead of replicating it",
           "tests/test_deploy.py::test_sum_of_device_weights_is_the_model_plus_replicas"),
    Mutant("mtp-off-by-one", "engine/deploy/rules.py",
           '"TOKENS_PER_STEP": sympy.Sum(a ** i, (i, 0, k))}',
           '"TOKENS_PER_STEP": sympy.Sum(a ** i, (i, 1, k))}',
           ("tests/test_mtp_decoding.py",),
           "a speculative step's tokens leave out the main model's own token",
           "tests/test_mtp_decoding.py::test_expected_tokens_per_step_by_hand"),
    Mutant("plan-price-one-replica", "engine/serving/sizing.py",
           'hourly = None if self.price is None else row["total_gpus"] * self.price',
           'hourly = None if self.price is None else row["n_gpus"] * self.price',
           ("tests/test_plan.py",),
           "plan prices one replica's GPUs, not every replica the load needs",
           "tests/test_plan.py::test_a_load_of_users_is_priced_over_every_replica"),
    Mutant("usd-per-m-hour", "engine/serving/rules.py",
           '("usd_per_m_tokens", _("usd_per_hour") / (_("tokens") * 3600.0) * 1e6),',
           '("usd_per_m_tokens", _("usd_per_hour") / _("tokens") * 1e6),',
           ("tests/test_disagg.py",),
           "dollars per million tokens divides an hourly price by tokens per second",
           "tests/test_disagg.py::test_usd_per_m_tokens_by_hand"),
    # -- seventeenth pass: ops, pipeline, context and expert parallelism, schedule and serving rules
    # (30 more, 2026-12-07: 11 survived the engine's 1,278 tests outside the site and browser ones,
    # one of them caught only by the browser's consistency test; each now has the hand-derived killer
    # named below. The compressed cache's length was two copies of one rule, now engine.language.kv.kept_length)
    Mutant("chunked-off-by-one", "engine/language/ops/attention.py",
           "return q * chunk * (chunk + 1) / 2 + r * (r + 1) / 2",
           "return q * chunk * (chunk + 1) / 2 + r * (r - 1) / 2",
           ("tests/test_spec_features_llama4.py",),
           "a chunked mask's partial chunk leaves out each query's own key (Llama 4's local layers)",
           "tests/test_spec_features_llama4.py::test_chunked_prefill_pairs_equal_the_enumerated_mask"),
    Mutant("sliding-window-plus-one", "engine/language/ops/attention.py",
           '            m = sympy.Min(n, window)\n',
           '            m = sympy.Min(n, window + 1)\n',
           ("tests/test_hand_attention.py",),
           "a sliding window of w sees w + 1 keys",
           "tests/test_hand_attention.py::test_sliding_window_pairs_gpt_oss"),
    Mutant("compressed-floor-sum-off", "engine/language/ops/attention.py",
           "q * (n - every * q + 1)",
           "q * (n - every * q)",
           ("tests/test_deepseek_v4.py",),
           "compressed attention's pairs: a query past its last whole window sees one entry too few",
           "tests/test_deepseek_v4.py::test_csa_attention_grows_with_context_times_topk"),
    Mutant("visible-blocks-no-partial", "engine/language/ops/attention.py",
           "return block * q * (q + 1) / 2 + r * (q + 1)",
           "return block * q * (q + 1) / 2 + r * q",
           ("tests/test_block_topk.py",),
           "block top-k leaves out each query's own partial block (MiniMax-M3's indexer)",
           "tests/test_block_topk.py::test_block_topk_flops_equal_the_enumerated_selection"),
    Mutant("compressed-cache-ceil", "engine/language/kv.py",
           "        return sympy.floor(length / every)",
           "        return sympy.ceiling(length / every)",
           ("tests/test_deepseek_v4.py",),
           "a compressed cache holds an entry for a window still filling (ceil, not floor)",
           "tests/test_deepseek_v4.py::test_kv_bytes_per_request"),
    Mutant("head-sum-mac-once", "engine/language/ops/attention.py",
           "_head_sum_shape, lambda c, out: 2 * c.inputs[0].computed)",
           "_head_sum_shape, lambda c, out: 1 * c.inputs[0].computed)",
           ("tests/test_hand_ops.py",),
           "DSA's indexer head sum counts one FLOP per multiply-add",
           "tests/test_hand_ops.py::test_dsa_indexer_head_sum_and_topk"),
    Mutant("compress-pool-no-softmax", "engine/language/ops/attention.py",
           "call.inputs[0].axes[-1].size * 8",
           "call.inputs[0].axes[-1].size * 3",
           ("tests/test_hand_ops.py",),
           "DeepSeek-V4's compressor pool leaves out the window's softmax",
           "tests/test_hand_ops.py::test_deepseek_v4_compressor_pool_per_token_and_channel"),
    Mutant("rope-whole-head", "engine/language/ops/elementwise.py",
           "return 3 * x.computed * rotary / x.axes[-1].size",
           "return 3 * x.computed",
           ("tests/test_models_frontier.py",),
           "partial rotary embedding priced over the whole head dim",
           "tests/test_models_frontier.py::test_minimax_partial_rope_flops"),
    Mutant("glu-no-product", "engine/language/ops/elementwise.py",
           '(ACTIVATION_FLOPS[c.attrs["act"]] + 1) * out.computed',
           'ACTIVATION_FLOPS[c.attrs["act"]] * out.computed',
           ("tests/test_hand_ops.py",),
           "the gated MLP's act(gate) x up leaves out the product",
           "tests/test_hand_ops.py::test_gated_mlp_counts_the_gate_product"),
    Mutant("linear-bias-free", "engine/language/ops/dense.py",
           'return flops + (rows * call.dims["out"] if call.attrs["bias"] else ZERO)',
           "return flops",
           ("tests/test_ops.py",),
           "a linear layer's bias add costs no FLOPs",
           "tests/test_ops.py::test_linear_contracts_last_axis"),
    Mutant("head-linear-mac-once", "engine/language/ops/dense.py",
           'lambda c, out: 2 * _rows(c.inputs[0]) * c.dims["in"] * c.dims["out"],\n        lambda c: (Leaf("weight", (c.axis("heads")',
           'lambda c, out: _rows(c.inputs[0]) * c.dims["in"] * c.dims["out"],\n        lambda c: (Leaf("weight", (c.axis("heads")',
           ("tests/test_hand_ops.py",),
           "MLA's absorbed per-head matmuls count one FLOP per multiply-add",
           "tests/test_hand_ops.py::test_mla_absorbed_decode_matmuls_per_head"),
    Mutant("grouped-linear-one-group", "engine/language/ops/dense.py",
           'lambda c, out: 2 * Tensor(c.inputs[0].axes[:-1]).numel * c.dims["in"] * c.dims["out"],',
           'lambda c, out: 2 * Tensor(c.inputs[0].axes[:-2]).numel * c.dims["in"] * c.dims["out"],',
           ("tests/test_ops.py",),
           "a grouped linear (DeepSeek-V4's wo_a) prices one group's matmul",
           "tests/test_ops.py::test_grouped_linear_stores_one_stacked_matrix"),
    Mutant("stage-of-rounds-up", "engine/language/streams.py",
           "return min(pp - 1, max(0, layer) * pp // n_layers)",
           "return min(pp - 1, -(-max(0, layer) * pp // n_layers))",
           ("tests/test_streams.py",),
           "pipeline stages take layers rounding up (the first stage one layer short)",
           "tests/test_streams.py::test_glm52_stream_crossing_a_pipeline_stage_is_a_send_recv"),
    Mutant("mtp-on-first-stage", "engine/deploy/stage_memory.py",
           "per_stage[-1] += mtp_weights",
           "per_stage[0] += mtp_weights",
           ("tests/test_mtp_decoding.py",),
           "the MTP stack's weights on the first pipeline stage, not the last",
           "tests/test_mtp_decoding.py::test_weight_formula_counts_the_mtp_stack"),
    Mutant("lightest-stage", "engine/deploy/stage_memory.py",
           "worst = max(range(config.pp), key=lambda s: float(per_stage[s]))",
           "worst = min(range(config.pp), key=lambda s: float(per_stage[s]))",
           ("tests/test_mtp_decoding.py",),
           "weights per GPU read from the lightest pipeline stage",
           "tests/test_mtp_decoding.py::test_weight_formula_counts_the_mtp_stack"),
    Mutant("ring-pass-own-block", "engine/deploy/placement_parallel.py",
           "(cp.expr - 1) * source.out_read",
           "cp.expr * source.out_read",
           ("tests/test_hand_comm.py",),
           "ring attention passes a device its own K/V block too (cp blocks, not cp - 1)",
           "tests/test_hand_comm.py::test_ring_context_parallel_kv_bytes"),
    Mutant("dispatch-sends-local-share", "engine/deploy/placement_parallel.py",
           "comm = self.local(row.out, layout) * self.types.act_bytes * (ep.expr - 1) / ep.expr",
           "comm = self.local(row.out, layout) * self.types.act_bytes",
           ("tests/test_hand_comm.py",),
           "the expert all-to-all sends the tokens bound for the device's own experts",
           "tests/test_hand_comm.py::test_expert_parallel_across_nodes_uses_scale_out"),
    Mutant("ttft-no-pipeline-fill", "engine/deploy/rules.py",
           '(_("steps") * _("prefill") / pp + (pp - 1) * _("fill") / pp, pp > 1)',
           '(_("steps") * _("prefill") / pp, pp > 1)',
           ("tests/test_deploy.py",),
           "TTFT under pipeline parallelism leaves out the pipeline's fill",
           "tests/test_deploy.py::test_pipeline_stages_split_layers_and_send_the_hidden_state"),
    Mutant("prefill-steps-fractional", "engine/deploy/rules.py",
           'call("cdiv", _("per_rank") * input_len, _("step_tokens"))',
           '_("per_rank") * input_len / _("step_tokens")',
           ("tests/test_hand_capacity.py",),
           "chunked prefill runs a fraction of a step (no ceiling)",
           "tests/test_hand_capacity.py::test_prefill_runs_in_steps_of_the_token_budget"),
    Mutant("micro-batches-exceed-requests", "engine/deploy/rules.py",
           '("micro_batches", call("max", 1, call("min", pp, batch))),',
           '("micro_batches", call("max", 1, pp)),',
           ("tests/test_capacity_rule.py",),
           "pp micro-batches whatever the batch (fewer requests than stages split into empty micro-batches)",
           "tests/test_capacity_rule.py::test_one_rule"),
    Mutant("comm-no-alpha", "engine/deploy/rules.py",
           '("t_comm", _("comm") / _("link") + _("calls") * _("alpha")),',
           '("t_comm", _("comm") / _("link")),',
           ("tests/test_hand_comm.py",),
           "the deploy page's step program leaves out the collectives' per-call latency",
           "tests/test_hand_comm.py::test_the_deploy_pages_step_program_prices_each_calls_latency"),
    Mutant("mean-context-whole-output", "engine/deploy/rules.py",
           '("mean_context", input_len + call("max", output_len - 1, 0.0) / 2),',
           '("mean_context", input_len + output_len / 2),',
           ("tests/test_hand_steady_capacity.py",),
           "the steady decode's mean context counts the whole output (off by half a token)",
           "tests/test_hand_steady_capacity.py::test_mean_tpot_at_batch_one_reads_the_mean_context"),
    Mutant("two-batch-one-half", "engine/deploy/rules.py",
           'call("max", call("max", 2.0 * _("kernels"), 2.0 * _("half_comm")), _("full_bound"))',
           'call("max", call("max", _("kernels"), 2.0 * _("half_comm")), _("full_bound"))',
           ("tests/test_phase_bound.py",),
           "two-batch overlap prices the kernels of one half only",
           "tests/test_phase_bound.py::test_two_batch_decode_composes_the_half_batch"),
    Mutant("room-no-reserve", "engine/deploy/rules.py",
           '("room", _("usable") - _("weights") - _("reserve") - _("act"))',
           '("room", _("usable") - _("weights") - _("act"))',
           ("tests/test_hand_capacity.py",),
           "the KV room ignores the framework's runtime reserve",
           "tests/test_hand_capacity.py::test_llama_8b_weights_and_kv_on_one_gpu"),
    Mutant("prefill-tps-per-replica", "engine/deploy/rules.py",
           'batch * input_len / _("ttft") / _("replica")),',
           'batch * input_len / _("ttft")),',
           ("tests/test_hand_capacity.py",),
           "prefill tokens/s per GPU is the replica's whole rate",
           "tests/test_hand_capacity.py::test_prefill_throughput_is_per_gpu_of_the_replica"),
    Mutant("max-prefill-batch-one-rank", "engine/deploy/rules.py",
           '("max_prefill_batch", dp_attn * call("min"',
           '("max_prefill_batch", call("min"',
           ("tests/test_hand_capacity.py",),
           "max_prefill_batch counts one DP-attention replica's step",
           "tests/test_hand_capacity.py::test_every_attention_replica_runs_its_own_prefill_step"),
    Mutant("transfer-smaller-share", "engine/serving/rules.py",
           'TRANSFER = program(("nbytes", call("max", _("share_p"), _("share_d")))) + LINK_TIME',
           'TRANSFER = program(("nbytes", call("min", _("share_p"), _("share_d")))) + LINK_TIME',
           ("tests/test_disagg.py",),
           "the prefill choice budgets the smaller of the pools' KV shares per GPU",
           "tests/test_disagg.py::test_the_prefill_choice_budgets_the_larger_share_per_gpu"),
    Mutant("join-smaller-share", "engine/serving/rules.py",
           '("kv_link_bytes", call("max", _("share_p"), _("share_d"))),',
           '("kv_link_bytes", call("min", _("share_p"), _("share_d"))),',
           ("tests/test_disagg.py",),
           "a disaggregated pair's KV transfer sends the smaller share per GPU",
           "tests/test_disagg.py::test_kv_crosses_at_the_larger_share_per_gpu"),
    Mutant("disagg-rate-prefill-only", "engine/serving/rules.py",
           '("requests_per_s", call("min", _("prefill_replicas") * _("x_p"), _("decode_replicas") * _("x_d"))),',
           '("requests_per_s", _("prefill_replicas") * _("x_p")),',
           ("tests/test_disagg.py",),
           "a disaggregated pair's request rate is its prefill pool's, however few decode replicas",
           "tests/test_disagg.py::test_ttft_tpot_and_pool_ratio_by_hand"),
    Mutant("disagg-price-prefill-only", "engine/serving/rules.py",
           '("usd_per_hour", _("prefill_replicas") * _("n_p") * _("price_p") + _("decode_replicas") * _("n_d") * _("price_d")),',
           '("usd_per_hour", _("prefill_replicas") * _("n_p") * _("price_p") + _("decode_replicas") * _("n_d") * _("price_p")),',
           ("tests/test_disagg.py",),
           "a split over two GPU types prices the decode GPUs at the prefill GPU's price",
           "tests/test_disagg.py::test_a_split_over_two_gpu_types_prices_each_pool_at_its_own_gpu"),

    # -- seventeenth pass, second round: links, HBM, compute dtype, packed formats, load, front and
    # exclusion lists, the page's capacity bound (14 more: two survived, exclude_modules and the page's
    # bound, and have the killers named below)
    Mutant("scale-up-both-directions", "engine/deploy/hardware.py",
           "return self.scale_up.value * 1e9 / 2",
           "return self.scale_up.value * 1e9",
           ("tests/test_hand_comm.py",),
           "a collective sends at the scale-up link's two-direction figure (NVLink's 900 GB/s, not 450 each way)",
           "tests/test_hand_comm.py::test_tp_all_reduce_link_and_time"),
    Mutant("hbm-mib-as-mb", "engine/deploy/hardware.py",
           "return self.hbm_reported.value * 2**20",
           "return self.hbm_reported.value * 1e6",
           ("tests/test_hand_capacity.py",),
           "the driver's reported HBM read as decimal megabytes, not MiB",
           "tests/test_hand_capacity.py::test_llama_8b_weights_and_kv_on_one_gpu"),
    Mutant("ring-all-reduce-one-pass", "engine/deploy/hardware.py",
           'by_ring = self.base["ring"] + ring_steps(2 * (n - 1), 2 * (N - 1))',
           'by_ring = self.base["ring"] + ring_steps(n - 1, N - 1)',
           ("tests/test_hand_comm.py",),
           "a ring all-reduce's latency counts one pass around the ring, not reduce-scatter + all-gather",
           "tests/test_hand_comm.py::test_tp_all_reduce_link_and_time"),
    Mutant("tree-intra-every-rank", "engine/deploy/hardware.py",
           '(n // N - 1) * near["tree"]',
           '(n - 1) * near["tree"]',
           ("tests/test_hand_comm.py",),
           "a tree all-reduce climbs every rank inside a node, not the node's ranks",
           "tests/test_hand_comm.py::test_tp_all_reduce_link_and_time"),
    Mutant("all-gather-n-steps", "engine/deploy/hardware.py",
           'return self.base["ring"] + ring_steps(n - 1, N - 1)',
           'return self.base["ring"] + ring_steps(n, N)',
           ("tests/test_hand_comm.py",),
           "an all-gather's latency counts n ring steps, not n - 1",
           "tests/test_hand_comm.py::test_all_gather_and_reduce_scatter_around_feature_split_experts"),
    Mutant("w4a16-at-fp4-peak", "engine/deploy/hardware.py",
           "return max(weights, native_act, key=COMPUTE_DTYPES.index)",
           "return weights",
           ("tests/test_deploy.py",),
           "FP4 weights with BF16 activations (W4A16) run at the FP4 tensor-core peak",
           "tests/test_deploy.py::test_mxfp4_experts_run_at_bf16_weight_only_kernels"),
    Mutant("int4-four-per-int32", "corpus/quant/int4_g32_packed.yaml",
           'shape: [rows, "cols / 8"]',
           'shape: [rows, "cols / 4"]',
           ("tests/test_quant_checkpoints.py",),
           "int4 group-32 packs four values per int32, not eight",
           "tests/test_quant_checkpoints.py::test_int4_group32_packed_layer_bytes_by_hand"),
    Mutant("nvfp4-unpacked", "corpus/quant/nvfp4.yaml",
           '  - {key: "{weight}", dtype: U8, shape: [rows, "cols / 2"]}',
           '  - {key: "{weight}", dtype: U8, shape: [rows, cols]}',
           ("tests/test_storage.py",),
           "NVFP4 stores one value per byte (not two E2M1 values packed)",
           "tests/test_storage.py::test_nvfp4_layout_on_llama"),
    Mutant("rate-without-ttft", "engine/serving/sizing.py",
           'rps = batch / (p["ttft_s"] + output_len * p["tpot_s"])',
           'rps = batch / (output_len * p["tpot_s"])',
           ("tests/test_hand_serving.py",),
           "a replica's requests/s leaves its prefill out of Little's law",
           "tests/test_hand_serving.py::test_an_sla_met_exactly_is_met"),
    Mutant("users-replicas-floor", "engine/serving/sizing.py",
           '        replicas = -(-sla.users // batch)\n',
           '        replicas = np.maximum(1, sla.users // batch)\n',
           ("tests/test_plan.py",),
           "plan's replicas for U users round down",
           "tests/test_plan.py::test_cheapest_agree_with_archledger_deploy"),
    Mutant("front-keeps-ties", "engine/serving/pareto.py",
           "return order[ys > best_before]",
           "return order[ys >= best_before]",
           ("tests/test_plan.py",),
           "the Pareto front keeps a point another equals in tokens/s/user and beats in tokens/s/GPU",
           "tests/test_plan.py::test_front_by_hand"),
    Mutant("glob-not-parents", "engine/language/module_patterns.py",
           'return re.compile(fnmatch.translate(pattern)), re.compile(fnmatch.translate(pattern + ".*"))',
           "return (re.compile(fnmatch.translate(pattern)),)",
           ("tests/test_quant_checkpoints.py",),
           "an exclusion glob (vision_tower) covers the module itself, not its children",
           "tests/test_quant_checkpoints.py::test_patterns_follow_each_formats_rule"),
    Mutant("exclusions-no-modelopt-file", "engine/language/module_patterns.py",
           'EXCLUSION_KEYS = ("ignore", "exclude_modules", "modules_to_not_convert")',
           'EXCLUSION_KEYS = ("ignore", "modules_to_not_convert")',
           ("tests/test_quant_checkpoints.py",),
           "ModelOpt's exclude_modules list not read (its modules counted quantized)",
           "tests/test_quant_checkpoints.py::test_every_formats_exclusion_list_is_read"),
    Mutant("serving-bound-one-replica", "engine/deploy/rules.py",
           'SERVING_BOUND = program(("max_concurrent_requests", dp_attn * _("cap")))',
           'SERVING_BOUND = program(("max_concurrent_requests", _("cap")))',
           ("tests/test_hand_capacity.py",),
           "the deploy page's capacity bound counts one DP-attention replica (the page skips configs that hold the batch)",
           "tests/test_hand_capacity.py::test_the_deploy_pages_capacity_bound_counts_every_attention_replica"),

    # -- seventeenth pass, third round: the stored tables' rates and the landscape's ridge (5 more, all killed)
    Mutant("decode-rate-per-replica", "engine/serving/steady.py",
           'return pl.col("batch") / pl.col(tpot).cast(pl.Float64) / pl.col("n_gpus")',
           'return pl.col("batch") / pl.col(tpot).cast(pl.Float64)',
           ("tests/test_site_offgrid.py",),
           "the stored tables' decode tokens/s per GPU (fronts, the GPU comparison) is the replica's whole rate",
           "tests/test_site_offgrid.py::test_front_chart_is_each_gpus_pareto_front_of_the_grid_rows"),
    Mutant("front-user-rate-worst", "engine/serving/steady.py",
           '("tokens_per_s_per_user", 1 / pl.col("tpot_mean_s").cast(pl.Float64)),',
           '("tokens_per_s_per_user", 1 / pl.col("tpot_s").cast(pl.Float64)),',
           ("tests/test_site_offgrid.py",),
           "a front point's tokens/s per user read from the worst case's TPOT, its tokens/s per GPU from the steady one",
           "tests/test_site_offgrid.py::test_front_chart_is_each_gpus_pareto_front_of_the_grid_rows"),
    Mutant("ridge-batch-without-topk", "engine/batch/landscape.py",
           'row[f"batch_{g}"] = {"value": math.ceil(t * n / k),',
           'row[f"batch_{g}"] = {"value": math.ceil(t * n),',
           ("tests/test_landscape.py",),
           "the landscape's batch for an expert to reach the ridge forgets that a token visits top_k of n experts",
           "tests/test_landscape.py::test_ridge_batch_equals_hand_derivation"),
    Mutant("ridge-matmul-one-flop", "engine/batch/landscape.py",
           "    den = 2 * hidden * width - r * b * (hidden + width)",
           "    den = hidden * width - r * b * (hidden + width)",
           ("tests/test_landscape.py",),
           "the landscape's ridge tokens count a matmul's multiply-add as one FLOP",
           "tests/test_landscape.py::test_ridge_batch_equals_hand_derivation"),
    Mutant("ridge-reads-input-only", "engine/batch/landscape.py",
           "    den = 2 * hidden * width - r * b * (hidden + width)",
           "    den = 2 * hidden * width - r * b * hidden",
           ("tests/test_landscape.py",),
           "the landscape's ridge tokens count the expert's input read but not its output written",
           "tests/test_landscape.py::test_ridge_batch_equals_hand_derivation"),
    # -- seventeenth pass, fourth round: the verification guards (5 more: three survived, each now
    # with the killer named below)
    Mutant("weight-guard-ignores-bytes", "engine/verify/guards/weight.py",
           "return family.numel != group.numel or family.nbytes != group.nbytes",
           "return family.numel != group.numel",
           ("tests/test_verify_fast.py",),
           "the weight guard compares a tensor's elements but not its bytes (a dtype slip passes)",
           "tests/test_verify_fast.py::test_failing_manifest_verdicts_are_the_per_tensor_ones"),
    Mutant("weight-guard-no-total", "engine/verify/guards/weight.py",
           '    if ours_total != theirs_total:\n',
           '    if ours_total > theirs_total:\n',
           ("tests/test_verify_fast.py",),
           "the weight guard flags a spec storing more bytes than the checkpoint, not fewer",
           "tests/test_verify_fast.py::test_failing_manifest_verdicts_are_the_per_tensor_ones"),
    Mutant("layer-plan-shorter-passes", "engine/verify/guards/schedule.py",
           "and len(lookup(config, p.field)) != len(features))",
           "and len(lookup(config, p.field)) > len(features))",
           ("tests/test_guards_layer_plans.py",),
           "a per-layer config list shorter than the spec's stack passes the length check",
           "tests/test_guards_layer_plans.py::test_a_per_layer_list_of_another_length_is_one_error"),
    Mutant("layer-plan-unknown-values-pass", "engine/verify/guards/schedule.py",
           "unknown = sorted({v for v in value if isinstance(v, (str, int, float)) and v not in plan.values}, key=str)",
           "unknown = sorted({v for v in value if isinstance(v, str) and v not in plan.values}, key=str)",
           ("tests/test_guards_layer_plans.py",),
           "a per-layer number the registry does not know (attn_type_list's 2) is read, not named",
           "tests/test_guards_layer_plans.py::test_a_per_layer_number_the_registry_does_not_know_is_named"),
    Mutant("compressed-every-one-allowed", "engine/verify/guards/axiom.py",
           'if c.growth == "compressed" and (c.every is None or c.every < 2):',
           'if c.growth == "compressed" and (c.every is None or c.every < 1):',
           ("tests/test_guards.py",),
           "the axiom guard lets a compressed cache keep one entry per token",
           "tests/test_guards.py::test_axiom_guard_catches_a_compressed_cache_of_one_token_per_entry"),
)


def check_texts(mutants, root: Path = REPO) -> list[str]:
    """Every mutant's old text occurs exactly once in its file, and no two mutants plant the same
    edit (problems, empty when all hold)."""
    problems = []
    ids = [m.id for m in mutants]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"mutant id {dup!r} is used twice")
    edits: dict[tuple, str] = {}
    for m in mutants:                    # one bug counted once in the score
        first = edits.setdefault((m.file, m.old, m.new), m.id)
        if first != m.id:
            problems.append(f"{m.id}: plants the same edit as {first}; name its tests there instead")
    for m in mutants:
        path = root / m.file
        if not path.is_file():
            problems.append(f"{m.id}: {m.file} does not exist")
            continue
        count = path.read_text().count(m.old)
        if count != 1:
            problems.append(f"{m.id}: the old text occurs {count} times in {m.file} (expected exactly once): {m.old!r}")
        if m.old == m.new:
            problems.append(f"{m.id}: old and new text are the same")
        for test in m.tests:                 # a file, or one test of it (file::name, as pytest takes it)
            if not (root / test.split("::")[0]).is_file():
                problems.append(f"{m.id}: test file {test} does not exist")
    return problems


#: Never copied, whatever .gitignore says: git's own folder (a file in a worktree).
ALWAYS_SKIPPED = (".git",)


def _ignore_patterns(root: Path) -> list[tuple[str, bool, bool]]:
    """``root/.gitignore`` as (glob, anchored at the root, folders only) triples (blank lines and
    comments dropped; the repo's file uses plain globs only: no negation, no ``**``)."""
    path = root / ".gitignore"
    out = []
    for line in (path.read_text().splitlines() if path.is_file() else []):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        folders = line.endswith("/")
        line = line.rstrip("/")
        anchored = line.startswith("/") or "/" in line
        out.append((line.lstrip("/"), anchored, folders))
    return out


def source_files(root: Path = REPO) -> list[str]:
    """Every file under ``root`` (relative, sorted) that ``.gitignore`` does not ignore, without
    ``.git``: what a checkout's tracked and untracked files are, read from the folder itself so a
    tree that is not a git checkout copies alike (calling git there fails: "not a git repository")."""
    patterns = _ignore_patterns(root)

    def ignored(rel: str, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if name in ALWAYS_SKIPPED:
            return True
        return any((not folders or is_dir) and fnmatch.fnmatchcase(rel if anchored else name, glob)
                   for glob, anchored, folders in patterns)

    files = []
    for folder, dirs, names in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = sorted(d for d in dirs if not ignored(prefix + d, not os.path.islink(os.path.join(folder, d))))
        files.extend(prefix + n for n in names if not ignored(prefix + n, False))
        files.extend(prefix + d for d in dirs if os.path.islink(os.path.join(folder, d)))   # links as links
    return sorted(files)


def copy_tree(target: Path, root: Path = REPO) -> int:
    """The working tree as it is (:func:`source_files`) into ``target``: a plain file copy."""
    copied = 0
    for rel in source_files(root):
        src, dst = root / rel, target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        copied += 1
    return copied


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_import(copy: Path) -> str:
    """Where ``import engine`` resolves with cwd = the copy (must be inside the copy)."""
    probe = subprocess.run([sys.executable, "-c", "import engine, tests.conftest as c; print(engine.__file__); print(c.REPO)"],
                           cwd=copy, env=_env(copy), capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(f"error: cannot import the copy's engine: {probe.stderr.strip()}")
    engine_file, tests_repo = probe.stdout.split()
    for path in (engine_file, tests_repo):
        if not Path(path).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"error: the copy imports {path}, not its own files under {copy}")
    return engine_file


def run_pytest(copy: Path, tests, deselect=(), stop_first: bool = True) -> tuple[int, list[str], float, str]:
    """(exit code, FAILED node ids in order, seconds, output tail)."""
    # -n 0: one process (pyproject's addopts run a worker per core; under xdist a -x stop exits 2)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "-n", "0"]
    if stop_first:
        args.append("-x")
    for node in deselect:
        args += ["--deselect", node]
    start = time.perf_counter()
    proc = subprocess.run(args + list(tests), cwd=copy, env=_env(copy), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    seconds = time.perf_counter() - start
    failed = [line[len("FAILED "):].split(" - ")[0].strip() for line in proc.stdout.splitlines()
              if line.startswith("FAILED ")]
    return proc.returncode, failed, seconds, "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run these mutant ids only")
    parser.add_argument("--list", action="store_true", help="list the mutants and check their texts, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args()
    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.only and len(mutants) != len(set(args.only)):
        known = {m.id for m in MUTANTS}
        print(f"error: unknown mutant ids: {', '.join(sorted(set(args.only) - known))}", file=sys.stderr)
        return 2
    problems = check_texts(mutants)
    if problems:
        print("error: the mutant list does not match the code:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            print(f"{m.id:30} {m.file:22} {m.bug}  [{m.killer or ' '.join(m.tests)}]")
        return 0

    total_start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="archledger-mutants-"))
    copy = tmp / "repo"
    try:
        n = copy_tree(copy)
        engine_file = check_import(copy)
        print(f"copied {n} files to {copy}; engine imported from {engine_file}", file=sys.stderr)

        baseline: dict[tuple, list[str]] = {}
        for tests in sorted({m.tests for m in mutants}):
            code, failed, seconds, tail = run_pytest(copy, tests, stop_first=False)
            if code not in (0, 1):
                print(f"error: the unmutated tests {' '.join(tests)} did not run (exit {code}):\n{tail}", file=sys.stderr)
                return 2
            baseline[tests] = failed
            note = f"; already failing, deselected below: {', '.join(failed)}" if failed else ""
            print(f"baseline {' '.join(tests)}: {seconds:.1f} s{note}", file=sys.stderr)

        results = []
        for m in mutants:
            path = copy / m.file
            original = path.read_text()
            path.write_text(original.replace(m.old, m.new, 1))
            try:
                code, failed, seconds, tail = run_pytest(copy, m.tests, baseline[m.tests])
            finally:
                path.write_text(original)
            status = {0: "survived", 1: "killed"}.get(code, "error")
            if status == "killed" and m.killer and failed and not failed[0].startswith(m.killer):
                status = "killed (by another test)"
            killer = failed[0] if failed else ("" if code in (0, 1) else f"exit {code}: {tail.splitlines()[-1] if tail else ''}")
            results.append((m, status, killer, seconds))
            print(f"{m.id}: {status} ({seconds:.1f} s) {killer}", file=sys.stderr)
    finally:
        if args.keep:
            print(f"kept {copy}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print("| mutant | file | bug | result | killed by | s |\n|---|---|---|---|---|---|")
    for m, status, killer, seconds in results:
        print(f"| `{m.id}` | {m.file} | {m.bug} | {status} | {f'`{killer}`' if killer else '—'} | {seconds:.0f} |")
    killed = sum(1 for _, status, _, _ in results if status.startswith("killed"))
    elapsed = time.perf_counter() - total_start
    print(f"\nmutation score: {killed}/{len(results)} killed ({100 * killed / max(len(results), 1):.0f}%) "
          f"in {elapsed:.0f} s")
    already = sorted({node for failed in baseline.values() for node in failed})
    if already:
        print(f"note: failing before any mutation (deselected from the runs): {', '.join(already)}")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
