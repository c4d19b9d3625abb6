// The engine's deployment rules in the browser: one model's structures (formula trees written by
// engine/batch/deploy_export.py, split per config by site_builder/data.py) evaluated with archFormula
// (static/js/formula.js) and combined by the rules of engine/deploy/sol.py summarize(), mirrored below
// function by function. Used by the deploy page (deploy.js) and compare's side-by-side (compare.js);
// tests/test_site_offgrid.py checks it against `archledger deploy --json` at off-grid points.
//   var E = window.archDeployEval(root, slug); E.index().then(idx => E.at(idx.options[0], {input, output, batch}))
(function () {
  "use strict";
  var KINDS = ["compute", "comm", "fused"], BOUNDS = ["compute", "memory", "comm"];
  window.archDeployEval = function (root, slug) {
  var base = root + "data/deploy/" + slug + "/", cache = {}, model = null;
  function get(url) { if (!cache[url]) cache[url] = window.archJSON(url); return cache[url]; }   // site.js: gzip-aware
  // ---- page glue over the engine's rules -----------------------------------------------------------
  // Every rule is a program of engine/deploy/rules.py (index.json model.rules), run by the one
  // interpreter (formula.js run / evaluate / fold); this file only gathers each program's inputs.
  var F = window.archFormula;
  function tree(file, i) { return file.trees[i]; }
  function ev(t, env) { return F.evaluate(t, env); }
  function run(name, env) { return F.run(model.rules[name], env); }
  function linkRate(gpu, link) { return link === 1 ? gpu.scale_up : link === 2 ? gpu.scale_out : Infinity; }   // cost.link_bandwidth
  // rules.STEP for one step of a program (a step: [flops, bytes, comm, weights, calls, repeat, dtype,
  // link, coll, kind, view, uid, f_flops, f_bytes, f_comm]) at env, `times` over (MTP drafts)
  function stepValues(file, s, gpu, env, times) {
    var v = run("step", { flops: ev(tree(file, s[0]), env), bytes: ev(tree(file, s[1]), env), comm: ev(tree(file, s[2]), env),
                          weights: ev(tree(file, s[3]), env), calls: ev(tree(file, s[4]), env), repeat: s[5],
                          peak: gpu.peaks[s[6]], hbm: gpu.hbm_bytes_per_s, link: linkRate(gpu, s[7]),
                          alpha: s[8] >= 0 ? gpu.alpha[s[8]] : 0, times: times === undefined ? 1 : times });
    return { flops: v.flops_n, bytes: v.bytes_n, comm: v.comm_n, weights: v.weights_n, tc: v.t_compute_n, tm: v.t_memory_n,
             tl: v.t_comm_n, sol: v.t_sol_n, one_sol: v.t_sol, working_set: v.working_set, intensity: v.intensity,
             attained: v.attained };
  }
  function env(batch, seq, ctx, kv) { return { batch: batch, seq: seq, ctx: ctx, kv_bytes: kv }; }
  // a phase's steps: its program, then (speculative decoding with MTP, planner.with_drafts) the draft
  // steps `times` over. [[step, times, expected-time tree index or -1], ...]; exp / expDrafts: the
  // programs' lists of step expected-time trees (file.expected, engine.deploy.measured.expected_tree)
  function stepsOf(file, pid, drafts, times, exp, expDrafts) {
    var ex = exp === undefined || exp === null ? null : file.expected[exp];
    var out = file.programs[pid].map(function (s, i) { return [s, 1, ex ? ex[i] : -1]; });
    if (drafts !== undefined && drafts !== null && times > 0) {
      var exd = expDrafts === undefined || expDrafts === null ? null : file.expected[expDrafts];
      file.programs[drafts].forEach(function (s, i) { out.push([s, times, exd ? exd[i] : -1]); });
    }
    return out;
  }
  // a step's expected time from measured kernels (its tree bound to the step's t_sol), `times` over;
  // read: the measured tables it read (refs)
  function expectedOf(file, x, sol, e, read) {
    if (x[2] < 0) return NaN;
    var one = F.evaluate(tree(file, x[2]), Object.assign({}, e, { t_sol: sol }), file.lookups, read);
    return F.evaluate(["*", "x", "times"], { x: one, times: x[1] });
  }
  // cost.CompiledProgram.totals + sol.phase_times: each total the sum over steps (F.fold), the bound
  // the term whose steps take most of the time; step_bound_s = max(sum of compute, sum of memory, per
  // link class the sum of its comm time); comm_stream_s: the comm steps' time (the two-batch schedule's)
  function phase(file, steps, gpu, e) {
    var cols = { step_time_s: [], compute_time_s: [], memory_time_s: [], comm_time_s: [], flops: [], bytes: [], weight_bytes: [],
                 comm_bytes: [], comm_stream_s: [], step_expected_s: [], comm_expected_s: [] }, by = [[], [], []], links = {};
    steps.forEach(function (x) {
      var v = stepValues(file, x[0], gpu, e, x[1]), ex = expectedOf(file, x, v.one_sol, e), comm = KINDS[x[0][9]] === "comm";
      cols.step_expected_s.push(ex); if (comm) { cols.comm_expected_s.push(ex); cols.comm_stream_s.push(v.sol); }
      cols.flops.push(v.flops); cols.bytes.push(v.bytes); cols.weight_bytes.push(v.weights); cols.comm_bytes.push(v.comm);
      cols.compute_time_s.push(v.tc); cols.memory_time_s.push(v.tm); cols.comm_time_s.push(v.tl); cols.step_time_s.push(v.sol);
      (links[x[0][7]] = links[x[0][7]] || []).push(v.tl);
      by[v.tc >= v.tm && v.tc >= v.tl ? 0 : v.tm >= v.tl ? 1 : 2].push(v.sol);
    });
    var t = {};
    for (var c in cols) t[c] = F.fold("+", cols[c]);
    var sums = by.map(function (b) { return F.fold("+", b); }), k = 0;
    for (var i = 1; i < 3; i++) if (sums[i] > sums[k]) k = i;
    t.bound = BOUNDS[k];
    t.step_bound_s = F.fold("max", [t.compute_time_s, t.memory_time_s].concat(Object.keys(links).map(function (l) { return F.fold("+", links[l]); })));
    return t;
  }
  // rules.TWO_BATCH: a phase's step as two overlapped half-batches (the option's overlap policy
  // two_batch); the expected step time by the same rule over the half-batch's expected times
  function scheduled(o, file, steps, gpu, e, full) {
    if (o.overlap !== "two_batch") return full;
    var h = run("halves", { batch: e.batch, dp_attn: model.configs[o.cfg].dp_attn });
    var half = phase(file, steps, gpu, env(h.half_batch, e.seq, e.ctx, e.kv_bytes));
    full.step_time_s = run("two_batch", { half_time: half.step_time_s, half_comm: half.comm_stream_s, full_bound: full.step_bound_s,
                                          full_time: full.step_time_s, requests: h.requests }).time;
    full.step_expected_s = run("two_batch", { half_time: half.step_expected_s, half_comm: half.comm_expected_s,
                                              full_bound: full.step_bound_s, full_time: full.step_expected_s, requests: h.requests }).time;
    return full;
  }
  function phaseAt(o, file, steps, gpu, e) { return scheduled(o, file, steps, gpu, e, phase(file, steps, gpu, e)); }
  // sol.prefill_working_set: the largest kernel step's working set at the token budget's prompts
  function workingSet(file, steps, gpu, sch, input, kv) {
    var e = env(sch.budget_batch, input, input, kv), sets = [];
    steps.forEach(function (x) {
      if (KINDS[x[0][9]] === "comm" || !(x[0][5] > 0)) return;
      sets.push(stepValues(file, x[0], gpu, e).working_set);
    });
    return sets.length ? F.fold("max", sets) : 0;
  }
  function fit(room, kvDev) { return run("fit", { room: room, kv_dev: kvDev, max_batch: model.max_batch }).cap; }
  // sol.summarize for one point of option `o` (its config file loaded): every field the page shows.
  // p.mtp = k draft tokens (0 or absent: off), p.acceptance = a (speculative decoding with MTP)
  function summarize(o, file, p) {
    var cfg = model.configs[o.cfg], gpu = model.gpus[o.gpu], kv = model.kv_bytes[o.kv_dtype];
    var mtp = (p.mtp > 0 && o.mtp && cfg.mtp) ? p.mtp : 0, seq = mtp ? F.evaluate(["+", 1, "k"], { k: mtp }) : 1;   // Options.decode_seq
    var mem = mtp ? cfg.mtp : cfg;                  // weights and KV with the MTP stack on the last stage
    var batch = p.batch, input = p.input, adm = o.admission;
    var sch = run("schedule", { batch: batch, input_len: input, pp: cfg.pp, dp_attn: cfg.dp_attn, cp: cfg.cp,
                                prefill_tokens: model.budget, decode_seq: seq, limits: o.limits });
    var a = run("admission", { input_len: input, output_len: p.output, page_tokens: adm.page_tokens,
                               reserve_ratio: adm.reserve_ratio, reserve_clip_tokens: adm.reserve_clip_tokens });
    var length = a.length, k = sch.micro_batches, perRank = sch.per_rank, steps = sch.prefill_steps;
    var pre = o.prefill[sch.prefill_regime], dec = o.decode[sch.decode_regime];
    // with MTP: prefill runs the first module over the prompt once; decode verifies k + 1 tokens and drafts k
    var ex = o.expected ? o.expected[o.kv_dtype] : null;      // each step's expected-time tree (measured kernels)
    var preSteps = stepsOf(file, pre, mtp ? o.mtp.prefill[sch.prefill_regime] : null, 1, ex && ex.prefill[sch.prefill_regime],
                           ex && mtp ? ex.mtp.prefill[sch.prefill_regime] : null);
    var decSteps = stepsOf(file, dec, mtp ? o.mtp.decode[sch.decode_regime] : null, mtp, ex && ex.decode[sch.decode_regime],
                           ex && mtp ? ex.mtp.decode[sch.decode_regime] : null);
    var preEnv = env(sch.prefill_batch, input, input, kv), decEnv = env(sch.program_batch, seq, length, kv);
    var prefill = phaseAt(o, file, preSteps, gpu, preEnv), decode = phaseAt(o, file, decSteps, gpu, decEnv);
    var meanEnv = env(sch.program_batch, seq, a.mean_context, kv);                      // decode_mean
    var decodeMean = phaseAt(o, file, decSteps, gpu, meanEnv);
    var usable = run("usable", { hbm: gpu.hbm_bytes, hbm_fraction: model.hbm_fraction }).usable, weights = mem.weight_bytes_per_gpu;
    var kvDev = ev(mem.kv_dev, { length: length, kv_bytes: kv });
    var act = workingSet(file, preSteps, gpu, sch, input, kv);
    var reserve = o.reserve;                                                      // the framework's runtime reserve
    var room = run("room", { usable: usable, weights: weights, reserve: reserve, act: act }).room;   // what the KV cache gets
    var cap = fit(room, kvDev);
    // steady state under continuous batching (sol.steady_fit, engine.deploy.admission)
    var kvSteady = ev(mem.kv_dev, { length: a.steady_tokens, kv_bytes: kv });
    var steadyCap = fit(run("steady_room", { room: room, free_fraction: adm.free_fraction }).steady_room, kvSteady);
    var fill = null, fillStep = 0, fillBound = 0;
    if (cfg.pp > 1) {   // the pipeline fills with the largest step, then each step leaves one stage later
      fill = phaseAt(o, file, preSteps, gpu, env(sch.fill_batch, input, input, kv));
      fillStep = fill.step_time_s; fillBound = fill.step_bound_s;
    }
    function firstToken(field) {
      return run("first_token", { steps: steps, pp: cfg.pp, prefill: prefill[field], fill: fill ? fill[field] : 0 }).ttft;
    }
    // speculative decoding: a step emits E tokens per request on average, TPOT = step / E
    var perStep = mtp ? F.evaluate(model.rules.tokens_per_step, { mtp_tokens: mtp, mtp_acceptance: p.acceptance }) : 1;
    function perToken(step) { return run("per_token", { step: step, per_step: perStep }).per_token; }
    var ttft = firstToken("step_time_s");
    var sv = run("serving", { batch: batch, input_len: input, tp: cfg.tp, pp: cfg.pp, cp: cfg.cp, dp_attn: cfg.dp_attn,
                              per_step: perStep, ttft: ttft, decode_time: decode.step_time_s, decode_mean_time: decodeMean.step_time_s,
                              per_rank: perRank, cap: cap, steady_cap: steadyCap, kv_dev: kvDev, room: room, step_tokens: sch.step_tokens });
    var kvEnv = { length: length, kv_bytes: kv };
    function request(part) {   // every deployed stack's cache per request (the MTP stack's when it drafts)
      return ev(mtp ? ["+", model.kv_request[part], model.kv_request_mtp[part]] : model.kv_request[part], kvEnv);
    }
    return {
      batch: batch, input_len: input, output_len: p.output, micro_batches: k, prefill_steps: steps,
      usable_bytes_per_gpu: usable, weight_bytes_per_gpu: weights, reserve_bytes_per_gpu: reserve,
      weight_formula: mtp ? model.mtp_weight_formulas[cfg.mtp.weight_formula] : null,
      kv_bytes_per_request: request("all"), kv_state_bytes_per_request: request("state"),
      kv_bytes_per_request_per_gpu: kvDev, kv_budget_bytes_per_gpu: sv.kv_budget, kv_bytes_per_gpu: sv.kv_need,
      activation_bytes_per_gpu: act, free_bytes_per_gpu: sv.free_bytes,
      max_concurrent_requests: sv.max_concurrent_requests, max_prefill_batch: sv.max_prefill_batch,
      fits: !!sv.fits, shortfall_bytes: sv.shortfall_bytes,
      ttft_s: ttft, tpot_s: sv.tpot, ttft_bound_s: firstToken("step_bound_s"), tpot_bound_s: perToken(decode.step_bound_s),
      tpot_mean_bound_s: perToken(decodeMean.step_bound_s), overlap: o.overlap || "none",
      // from measured kernels (sol.summarize's *_expected_s; NaN for a build without the trees)
      ttft_expected_s: firstToken("step_expected_s"), tpot_expected_s: perToken(decode.step_expected_s),
      tpot_mean_expected_s: perToken(decodeMean.step_expected_s),
      prefill_tokens_per_s_per_gpu: sv.prefill_tokens_per_s_per_gpu,
      kv_steady_tokens_per_request: a.steady_tokens, kv_bytes_per_request_steady_per_gpu: kvSteady,
      max_concurrent_requests_steady: sv.max_concurrent_requests_steady, fits_steady: !!sv.fits_steady, admission: adm,
      tpot_mean_s: sv.tpot_mean, tokens_per_s_per_gpu_steady: sv.tokens_per_s_per_gpu_steady,
      tokens_per_s_per_gpu: sv.tokens_per_s_per_gpu, tokens_per_s_per_user: sv.tokens_per_s_per_user, extrapolated: length > model.max_context,
      tokens_per_s_per_user_steady: sv.tokens_per_s_per_user_steady, capacity_steady_per_rank: steadyCap,   // the steady state's, beside the worst case's
      mtp_tokens: mtp, mtp_acceptance: mtp ? p.acceptance : 0, tokens_per_step: perStep, decode_step_time_s: decode.step_time_s, decode_mean_step_time_s: decodeMean.step_time_s,
      bound: decode.bound, prefill_bound: prefill.bound, phases: { prefill: prefill, decode: decode },
      programs: { prefill: pre, decode: dec }, steps: { prefill: preSteps, decode: decSteps }, fill_step_s: fillStep, fill_bound_s: fillBound, pp: cfg.pp, dp_attn: cfg.dp_attn,
      gpus_per_replica: sv.replica, per_rank: perRank, capacity_per_rank: cap, peak_flops_dense: F.fold("max", gpu.peaks),
      hbm_bytes_per_s: gpu.hbm_bytes_per_s,
      env: { prefill: preEnv, decode: decEnv }
    };
  }
  // sol.op_rows_columns: one row per launched step (views launch nothing), one micro-batch's values
  // (k MTP drafts: a draft step's values and formulas are k times the exported --mtp 1 step's)
  function opRows(o, file, sum) {
    var gpu = model.gpus[o.gpu], out = [];
    ["prefill", "decode"].forEach(function (ph) {
      sum.steps[ph].forEach(function (x) {
        var s = x[0], n = x[1];
        if (s[10]) return;
        var v = stepValues(file, s, gpu, sum.env[ph], n), t = [v.tc, v.tm, v.tl], k = 0, read = [];
        var ex = expectedOf(file, x, v.one_sol, sum.env[ph], read);
        function text(i) { var f = file.strings[s[i]]; return n === 1 ? f : n + "*(" + f + ")"; }
        for (var i = 1; i < 3; i++) if (t[i] > t[k]) k = i;
        out.push({ phase: ph, op_uid: file.strings[s[11]], kind: KINDS[s[9]], flops: v.flops, bytes: v.bytes,
                   weight_bytes: v.weights, comm_bytes: v.comm, intensity: v.bytes > 0 ? v.intensity : Infinity,
                   attained_flops_per_s: v.attained,
                   t_compute_s: v.tc, t_memory_s: v.tm, t_comm_s: v.tl, t_sol_s: v.sol, bound: BOUNDS[k],
                   flops_formula: text(12), bytes_formula: text(13), comm_bytes_formula: text(14),
                   // ops.parquet's t_expected_s and measured: a measured table read (its name and file), else
                   // the bound / the default efficiency
                   t_expected_s: ex, measured: read.length > 0,
                   expected_tables: read.map(function (r) { return file.lookups[r].name + " (" + file.lookups[r].path + ")"; }) });
      });
    });
    return out;
  }
  // a config's file with the model's shared lists in place: the file holds its programs and names
  // the model's one common file (site_builder/data.py COMMON: the trees, formula texts and measured
  // tables every config's programs index, fetched once for every config) for its trees, strings and
  // lookups; a file that carries its own (an older build, a hand fixture) is used as it is
  var withShared = {};
  function fileOf(o) {
    var url = base + o.file + ".json.gz";
    if (!withShared[url]) withShared[url] = get(url).then(function (file) {
      if (typeof file.common !== "string") return file;
      return get(base + file.common + ".json.gz").then(function (sh) {
        file.trees = sh.trees; file.strings = sh.strings; file.lookups = sh.lookups;
        return file;
      });
    });
    return withShared[url];
  }
  // sizing.front: the indices of the non-dominated points of (x, y), both to maximize, in decreasing
  // x (ties: decreasing y, then input order); of exact duplicates the first is kept
  function front(x, y) {
    var order = x.map(function (_, i) { return i; }).sort(function (i, j) { return x[j] - x[i] || y[j] - y[i] || i - j; });
    var best = -Infinity, keep = [];
    order.forEach(function (i) { if (y[i] > best) { keep.push(i); best = y[i]; } });
    return keep;
  }
  // The grid's points of option `o` at one prompt and output length (and MTP drafting): its summary
  // at each batch the grid keeps (the build's rule, engine/batch/grid_eval.py GRID_BATCHES, shipped in
  // index.json and read by archFormula.select, at the capacities summarize gives at batch 1; the rows
  // the grid wrote agree, tests/test_site_offgrid.py), as [batch, summary] pairs.
  function gridPoints(o, file, batches, p) {
    var first = summarize(o, file, Object.assign({}, p, { batch: 1 }));
    var caps = { worst: first.max_concurrent_requests, steady: first.max_concurrent_requests_steady };
    return window.archFormula.select(model.grid_batches, batches, caps).map(function (b) {
      return [b, b === 1 ? first : summarize(o, file, Object.assign({}, p, { batch: b }))];
    });
  }
  // The throughput/interactivity front of each GPU type at one prompt and output length (and MTP
  // drafting): every option of `options` (its file fetched) at its gridPoints, the points the steady
  // state of continuous batching serves (fits_steady), reduced to each GPU's front of steady
  // tokens/s per GPU vs 1 / tpot_mean_s (engine.serving.fronts.grid_front, FRONT_BASIS). Rows: gpu,
  // n_gpus, config, batch and fronts.parquet's serving fields (tpot_s the steady TPOT, tpot_last_s
  // the worst case beside it), in front order per GPU (fastest user first).
  function fronts(options, batches, p) {
    return Promise.all(options.map(function (o) { return fileOf(o).then(function (file) { return [o, file]; }); })).then(function (pairs) {
      var byGpu = {}, gpus = [];
      pairs.forEach(function (pair) {
        var o = pair[0], file = pair[1];
        gridPoints(o, file, batches, p).forEach(function (point) {
          var b = point[0], r = point[1];
          if (!r.fits_steady) return;
          if (!byGpu[o.gpu]) { byGpu[o.gpu] = []; gpus.push(o.gpu); }
          byGpu[o.gpu].push({ gpu: o.gpu, n_gpus: o.n_gpus, config: o.config, batch: b, ttft_s: r.ttft_s, tpot_s: r.tpot_mean_s,
                              tpot_last_s: r.tpot_s, tokens_per_s_per_gpu: r.tokens_per_s_per_gpu_steady,
                              tokens_per_s_per_user: r.tokens_per_s_per_user_steady, max_concurrent_requests: r.max_concurrent_requests_steady,
                              max_concurrent_requests_worst: r.max_concurrent_requests });
        });
      });
      var rows = [];
      gpus.forEach(function (g) {
        var pts = byGpu[g];
        front(pts.map(function (r) { return r.tokens_per_s_per_user; }), pts.map(function (r) { return r.tokens_per_s_per_gpu; }))
          .forEach(function (i) { rows.push(pts[i]); });
      });
      return rows;
    });
  }
  // A precomputed front file (site_builder/data.py front_files: {columns, values: one list per
  // column}) as the chart's rows: the build's stored fields, rates included (engine.serving.steady.
  // front_point computes them; the page only reads them)
  function frontRows(t) {
    var n = t.values.length ? t.values[0].length : 0, rows = [];
    for (var k = 0; k < n; k++) {
      var o = {};
      t.columns.forEach(function (c, i) { o[c] = t.values[i][k]; });
      rows.push(o);
    }
    return rows;
  }
  // an upper bound of a config's capacity from index.json alone (no working set, no reserve: both are
  // >= 0), so a caller can skip fetching configs that cannot hold a batch without dropping one that can
  function roomBound(o, p) {
    var cfg = model.configs[o.cfg], gpu = model.gpus[o.gpu], adm = o.admission;
    var length = run("admission", { input_len: p.input, output_len: p.output, page_tokens: adm.page_tokens,
                                    reserve_ratio: adm.reserve_ratio, reserve_clip_tokens: adm.reserve_clip_tokens }).length;
    var kvDev = ev(cfg.kv_dev, { length: length, kv_bytes: model.kv_bytes[o.kv_dtype] });
    var usable = run("usable", { hbm: gpu.hbm_bytes, hbm_fraction: model.hbm_fraction }).usable;
    var room = run("room", { usable: usable, weights: cfg.weight_bytes_per_gpu, reserve: 0, act: 0 }).room;
    return run("serving_bound", { cap: fit(room, kvDev), dp_attn: cfg.dp_attn }).max_concurrent_requests;
  }
  return {
    // index.json: options (GPU, config, framework, KV dtype, its file), the model-wide trees and rates
    index: function () { return get(base + "index.json.gz").then(function (idx) { model = idx.model; return idx; }); },
    file: fileOf, summarize: summarize, opRows: opRows, roomBound: roomBound, gridPoints: gridPoints, fronts: fronts,
    frontRows: frontRows,
    // the summary and op rows at any point (index() first)
    at: function (o, p) { return fileOf(o).then(function (file) { var s = summarize(o, file, p); s.ops = opRows(o, file, s); return s; }); }
  };

  };
})();
