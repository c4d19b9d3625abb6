// The engine's deployment rules in the browser: one model's structures (formula trees written by
// engine/build/deploy_export.py, split per config by site_builder/data.py) evaluated with archFormula
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
  // ---- the engine's rules (engine/deploy/cost.py, structure.py, sol.py) ----------------------------
  function tree(file, i) { return file.trees[i]; }
  function ev(t, env) { return window.archFormula.evaluate(t, env); }
  function linkRate(gpu, link) { return link === 1 ? gpu.scale_up : link === 2 ? gpu.scale_out : Infinity; }   // cost.link_bandwidth
  // cost.CompiledProgram.evaluate: per step flops, bytes, comm, weights and the three times (a step:
  // [flops, bytes, comm, weights, calls, repeat, dtype, link, coll, kind, view, uid, f_flops, f_bytes, f_comm])
  function stepValues(file, s, gpu, env) {
    var f = ev(tree(file, s[0]), env), b = ev(tree(file, s[1]), env), c = ev(tree(file, s[2]), env), w = ev(tree(file, s[3]), env);
    var latency = ev(tree(file, s[4]), env) * (s[8] >= 0 ? gpu.alpha[s[8]] : 0);       // calls x per-call alpha
    var tc = f / gpu.peaks[s[6]], tm = b / gpu.hbm_bytes_per_s, tl = c / linkRate(gpu, s[7]) + latency;
    return { flops: f, bytes: b, comm: c, weights: w, tc: tc, tm: tm, tl: tl, sol: Math.max(Math.max(tc, tm), tl) };
  }
  function env(batch, seq, ctx, kv) { return { batch: batch, seq: seq, ctx: ctx, kv_bytes: kv }; }
  // a phase's steps: its program, then (speculative decoding with MTP, planner.with_drafts) the draft
  // steps `times` over (a draft step's calls are repeat x k / layers: linear in k). [[step, times,
  // expected-time tree index or -1], ...]; exp / expDrafts: the programs' lists of step expected-time
  // trees (file.expected, engine.deploy.measured.expected_tree), absent for a build without them
  function stepsOf(file, pid, drafts, times, exp, expDrafts) {
    var ex = exp === undefined || exp === null ? null : file.expected[exp];
    var out = file.programs[pid].map(function (s, i) { return [s, 1, ex ? ex[i] : -1]; });
    if (drafts !== undefined && drafts !== null && times > 0) {
      var exd = expDrafts === undefined || expDrafts === null ? null : file.expected[expDrafts];
      file.programs[drafts].forEach(function (s, i) { out.push([s, times, exd ? exd[i] : -1]); });
    }
    return out;
  }
  // a step's expected time from measured kernels at env e (its tree bound to the step's t_sol;
  // engine.deploy.measured.expected_tree), x `times`; read: the measured tables it read (refs)
  function expectedOf(file, x, sol, e, read) {
    if (x[2] < 0) return NaN;
    var ee = Object.assign({}, e, { t_sol: sol });
    return window.archFormula.evaluate(tree(file, x[2]), ee, file.lookups, read) * x[1];
  }
  function scaled(v, n) {
    if (n === 1) return v;
    var o = {}; for (var key in v) o[key] = v[key] * n; return o;
  }
  // cost.CompiledProgram.totals + sol.phase_times: sums over steps, the bound taking most of the time;
  // step_bound_s = the lower bound, max(sum of compute, sum of memory, per link class the sum of its
  // comm time); comm_stream_s = the no-overlap time of the comm steps (the two-batch schedule's)
  function phase(file, steps, gpu, e) {
    var t = { step_time_s: 0, compute_time_s: 0, memory_time_s: 0, comm_time_s: 0, flops: 0, bytes: 0, weight_bytes: 0, comm_bytes: 0,
              comm_stream_s: 0, step_expected_s: 0, comm_expected_s: 0 }, by = [0, 0, 0], links = {};
    steps.forEach(function (x) {
      var one = stepValues(file, x[0], gpu, e), v = scaled(one, x[1]), ex = expectedOf(file, x, one.sol, e);
      // sol.expected_phase_times: the steps' expected times one after another (the comm steps' apart)
      t.step_expected_s += ex;
      if (KINDS[x[0][9]] === "comm") t.comm_expected_s += ex;
      t.flops += v.flops; t.bytes += v.bytes; t.weight_bytes += v.weights; t.comm_bytes += v.comm;
      t.compute_time_s += v.tc; t.memory_time_s += v.tm; t.comm_time_s += v.tl; t.step_time_s += v.sol;
      links[x[0][7]] = (links[x[0][7]] || 0) + v.tl;
      if (KINDS[x[0][9]] === "comm") t.comm_stream_s += v.sol;
      var cb = v.tc >= v.tm && v.tc >= v.tl, mb = !cb && v.tm >= v.tl;
      by[cb ? 0 : mb ? 1 : 2] += v.sol;
    });
    var k = 0; for (var i = 1; i < 3; i++) if (by[i] > by[k]) k = i;
    t.bound = BOUNDS[k];
    t.step_bound_s = Math.max(t.compute_time_s, t.memory_time_s);
    for (var l in links) t.step_bound_s = Math.max(t.step_bound_s, links[l]);
    return t;
  }
  // sol.two_batch_time: a phase's step as two overlapped half-batches (the option's overlap policy
  // two_batch), never below the full batch's bound; fewer than 2 requests per replica: not split
  // (the expected step time too: the half-batch's expected kernels and collectives, sol.expected_phase_times)
  function scheduled(o, file, steps, gpu, e, full, perReplica) {
    if (o.overlap !== "two_batch" || !(perReplica >= 2)) return full;
    var half = phase(file, steps, gpu, env(e.batch / 2, e.seq, e.ctx, e.kv_bytes)), kernels = half.step_time_s - half.comm_stream_s;
    full.step_time_s = Math.max(Math.max(2 * kernels, 2 * half.comm_stream_s), full.step_bound_s);
    full.step_expected_s = Math.max(Math.max(2 * (half.step_expected_s - half.comm_expected_s), 2 * half.comm_expected_s),
                                    full.step_bound_s);
    return full;
  }
  // sol.prefill_working_set: the largest non-comm step's (bytes - weights) / repeat at the token budget
  function workingSet(file, steps, cfg, input, kv) {
    var prompts = cfg.dp_attn * (model.budget * cfg.cp) / input, e = env(prompts, input, input, kv), best = null;
    steps.forEach(function (x) {
      var s = x[0];
      if (KINDS[s[9]] === "comm" || !(s[5] > 0)) return;
      var x = (ev(tree(file, s[1]), e) - ev(tree(file, s[3]), e)) / s[5];
      if (best === null || x > best) best = x;
    });
    return best === null ? 0 : best;
  }
  // sol._fit_count: the largest n with n x kvDev <= room, by the same float product the fit test uses
  function fitCount(room, kvDev) {
    if (!(kvDev > 0)) return room >= 0 ? model.max_batch : 0;
    var n = Math.floor(Math.max(room, 0) / kvDev);
    if ((n + 1) * kvDev <= room) n += 1;
    if (n > 0 && n * kvDev > room) n -= 1;
    return room >= 0 ? n : 0;
  }
  // engine.deploy.admission: the mean paged tokens of one request over its output plus the admission
  // reservation (steady_tokens), and the output's mean decode context (mean_context); same float steps
  function ceilSum(n, page) { n = Math.max(n, 0); var q = Math.floor(n / page), r = n - q * page; return page * q * (q + 1) / 2 + r * (q + 1); }
  function steadyTokens(a, input, output) {
    var p = a.page_tokens, held = output > 0 ? p * (ceilSum(input + output - 1, p) - ceilSum(input - 1, p)) / Math.max(output, 1)
                                             : p * Math.ceil(input / p);
    var reserved = 0;
    if (a.reserve_ratio) {
      var k = Math.max(output - 1, 0), c = a.reserve_clip_tokens, total;
      total = c && k > c ? c * (c + 1) / 2 + (k - c) * c : k * (k + 1) / 2;
      reserved = a.reserve_ratio * total / Math.max(output, 1);
    }
    return held + reserved;
  }
  function meanContext(input, output) { return input + Math.max(output - 1, 0) / 2; }
  // engine.build.grid_eval._regime of structure.tokens_per_device: how many token limits a phase exceeds
  function regime(limits, tokens) { var r = 0; while (r < limits.length && limits[r] < tokens) r++; return r; }
  // structure.tokens_per_step: E = Sum(a**i, (i, 0, k)), the tokens a step emits per request
  function tokensPerStep(k, a) { var e = 0; for (var i = 0; i <= k; i++) e += Math.pow(a, i); return e; }
  // sol.summarize for one point of option `o` (its config file loaded): every field the page shows.
  // p.mtp = k draft tokens (0 or absent: off), p.acceptance = a (speculative decoding with MTP)
  function summarize(o, file, p) {
    var cfg = model.configs[o.cfg], gpu = model.gpus[o.gpu], kv = model.kv_bytes[o.kv_dtype];
    var mtp = (p.mtp > 0 && o.mtp && cfg.mtp) ? p.mtp : 0, seq = 1 + mtp;        // Options.decode_seq
    var mem = mtp ? cfg.mtp : cfg;                  // weights and KV with the MTP stack on the last stage
    var batch = p.batch, input = p.input, length = p.input + p.output;
    var k = Math.max(1, Math.min(cfg.pp, batch));                                 // structure.micro_batches
    var perRank = Math.ceil(batch / cfg.dp_attn);                                 // structure.requests_per_replica
    var budget = model.budget * cfg.cp;                                           // structure.step_tokens
    var steps = Math.max(k, Math.ceil(perRank * input / budget));                 // structure.prefill_steps
    var meanStep = cfg.dp_attn * perRank / steps;                                 // structure.prefill_program_batch
    var decBatch = cfg.dp_attn * perRank / k;                                     // structure.program_batch
    // the fusion regime of each phase (structure.tokens_per_device), hence the structure's programs
    var preRegime = regime(o.limits, Math.ceil(meanStep * input / (cfg.dp_attn * cfg.cp))), pre = o.prefill[preRegime];
    var decRegime = regime(o.limits, Math.ceil(decBatch * seq / cfg.dp_attn)), dec = o.decode[decRegime];
    // with MTP: prefill runs the first module over the prompt once; decode verifies k + 1 tokens and drafts k
    var ex = o.expected ? o.expected[o.kv_dtype] : null;      // each step's expected-time tree (measured kernels)
    var preSteps = stepsOf(file, pre, mtp ? o.mtp.prefill[preRegime] : null, 1, ex && ex.prefill[preRegime],
                           ex && mtp ? ex.mtp.prefill[preRegime] : null);
    var decSteps = stepsOf(file, dec, mtp ? o.mtp.decode[decRegime] : null, mtp, ex && ex.decode[decRegime],
                           ex && mtp ? ex.mtp.decode[decRegime] : null);
    var preEnv = env(meanStep, input, input, kv), decEnv = env(decBatch, seq, length, kv);
    var prefill = scheduled(o, file, preSteps, gpu, preEnv, phase(file, preSteps, gpu, preEnv), meanStep / cfg.dp_attn);
    var decode = scheduled(o, file, decSteps, gpu, decEnv, phase(file, decSteps, gpu, decEnv), decBatch / cfg.dp_attn);
    var meanEnv = env(decBatch, seq, meanContext(input, p.output), kv);                   // decode_mean
    var decodeMean = scheduled(o, file, decSteps, gpu, meanEnv, phase(file, decSteps, gpu, meanEnv), decBatch / cfg.dp_attn);
    var usable = gpu.hbm_bytes * model.hbm_fraction, weights = mem.weight_bytes_per_gpu;
    var kvDev = ev(mem.kv_dev, { length: length, kv_bytes: kv });
    var act = workingSet(file, preSteps, cfg, input, kv);
    var reserve = o.reserve;                                                      // the framework's runtime reserve
    var room = usable - weights - reserve - act;                                  // what the KV cache gets
    var cap = fitCount(room, kvDev), kvNeed = perRank * kvDev;
    // steady state under continuous batching (sol.summarize, engine.deploy.admission)
    var adm = o.admission, steadyTok = steadyTokens(adm, input, p.output);
    var kvSteady = ev(mem.kv_dev, { length: steadyTok, kv_bytes: kv }), steadyCap = fitCount(room * (1.0 - adm.free_fraction), kvSteady);
    var replica = cfg.tp * cfg.pp * cfg.cp;
    var ttft = steps * prefill.step_time_s / cfg.pp, fill = 0, fillBound = 0, ttftBound = steps * prefill.step_bound_s / cfg.pp;
    var ttftExpected = steps * prefill.step_expected_s / cfg.pp;
    if (cfg.pp > 1) {   // the pipeline fills with the largest step, then each step leaves one stage later
      var largest = cfg.dp_attn * Math.min(perRank / k, budget / input), fillEnv = env(largest, input, input, kv);
      var filled = scheduled(o, file, preSteps, gpu, fillEnv, phase(file, preSteps, gpu, fillEnv), largest / cfg.dp_attn);
      fill = filled.step_time_s; fillBound = filled.step_bound_s;
      ttft = ttft + (cfg.pp - 1) * fill / cfg.pp;
      ttftBound = ttftBound + (cfg.pp - 1) * fillBound / cfg.pp;
      ttftExpected = ttftExpected + (cfg.pp - 1) * filled.step_expected_s / cfg.pp;
    }
    // speculative decoding: a step emits E tokens per request on average, TPOT = step / E
    var perStep = mtp ? tokensPerStep(mtp, p.acceptance) : 1, tpot = mtp ? decode.step_time_s / perStep : decode.step_time_s;
    var tpotMean = decodeMean.step_time_s / perStep;
    var kvEnv = { length: length, kv_bytes: kv };
    function request(part) {   // every deployed stack's cache per request (the MTP stack's when it drafts)
      return ev(model.kv_request[part], kvEnv) + (mtp ? ev(model.kv_request_mtp[part], kvEnv) : 0);
    }
    return {
      batch: batch, input_len: input, output_len: p.output, micro_batches: k, prefill_steps: steps,
      usable_bytes_per_gpu: usable, weight_bytes_per_gpu: weights, reserve_bytes_per_gpu: reserve,
      weight_formula: mtp ? model.mtp_weight_formulas[cfg.mtp.weight_formula] : null,
      kv_bytes_per_request: request("all"), kv_state_bytes_per_request: request("state"),
      kv_bytes_per_request_per_gpu: kvDev, kv_budget_bytes_per_gpu: Math.max(room, 0), kv_bytes_per_gpu: kvNeed,
      activation_bytes_per_gpu: act, free_bytes_per_gpu: Math.max(room - kvNeed, 0),
      max_concurrent_requests: cfg.dp_attn * cap,
      max_prefill_batch: cfg.dp_attn * Math.min(Math.max(1, Math.floor(budget / input)), cap),
      fits: perRank <= cap, shortfall_bytes: Math.max(kvNeed - room, 0),
      ttft_s: ttft, tpot_s: tpot, ttft_bound_s: ttftBound, tpot_bound_s: decode.step_bound_s / perStep,
      tpot_mean_bound_s: decodeMean.step_bound_s / perStep, overlap: o.overlap || "none",
      // from measured kernels (sol.summarize's *_expected_s; NaN for a build without the trees)
      ttft_expected_s: ttftExpected, tpot_expected_s: decode.step_expected_s / perStep,
      tpot_mean_expected_s: decodeMean.step_expected_s / perStep,
      prefill_tokens_per_s_per_gpu: batch * input / ttft / replica,
      kv_steady_tokens_per_request: steadyTok, kv_bytes_per_request_steady_per_gpu: kvSteady,
      max_concurrent_requests_steady: cfg.dp_attn * steadyCap, fits_steady: perRank <= steadyCap, admission: adm,
      tpot_mean_s: tpotMean, tokens_per_s_per_gpu_steady: batch / tpotMean / replica,
      tokens_per_s_per_gpu: batch / tpot / replica, tokens_per_s_per_user: 1 / tpot, extrapolated: length > model.max_context,
      tokens_per_s_per_user_steady: 1 / tpotMean, capacity_steady_per_rank: steadyCap,   // the steady state's, beside the worst case's
      mtp_tokens: mtp, mtp_acceptance: mtp ? p.acceptance : 0, tokens_per_step: perStep, decode_step_time_s: decode.step_time_s, decode_mean_step_time_s: decodeMean.step_time_s,
      bound: decode.bound, prefill_bound: prefill.bound, phases: { prefill: prefill, decode: decode },
      programs: { prefill: pre, decode: dec }, steps: { prefill: preSteps, decode: decSteps }, fill_step_s: fill, fill_bound_s: fillBound, pp: cfg.pp, dp_attn: cfg.dp_attn,
      gpus_per_replica: replica, per_rank: perRank, capacity_per_rank: cap, peak_flops_dense: Math.max.apply(null, gpu.peaks),
      hbm_bytes_per_s: gpu.hbm_bytes_per_s,
      env: { prefill: env(meanStep, input, input, kv), decode: env(decBatch, seq, length, kv) }
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
        var one = stepValues(file, s, gpu, sum.env[ph]), v = scaled(one, n), t = [v.tc, v.tm, v.tl], k = 0, read = [];
        var ex = expectedOf(file, x, one.sol, sum.env[ph], read);
        function text(i) { var f = file.strings[s[i]]; return n === 1 ? f : n + "*(" + f + ")"; }
        for (var i = 1; i < 3; i++) if (t[i] > t[k]) k = i;
        out.push({ phase: ph, op_uid: file.strings[s[11]], kind: KINDS[s[9]], flops: v.flops, bytes: v.bytes,
                   weight_bytes: v.weights, comm_bytes: v.comm, intensity: v.bytes > 0 ? v.flops / v.bytes : Infinity,
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
  // the model's one shared file (site_builder/data.py SHARED: the trees, formula texts and measured
  // tables every config's programs index, fetched once for every config) for its trees, strings and
  // lookups; a file that carries its own (an older build, a hand fixture) is used as it is
  var withShared = {};
  function fileOf(o) {
    var url = base + o.file + ".json.gz";
    if (!withShared[url]) withShared[url] = get(url).then(function (file) {
      if (typeof file.shared !== "string") return file;
      return get(base + file.shared + ".json.gz").then(function (sh) {
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
  // at each batch the grid keeps (the build's rule, engine/build/grid_eval.py GRID_BATCHES, shipped in
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
                              tokens_per_s_per_user: 1 / r.tpot_mean_s, max_concurrent_requests: r.max_concurrent_requests_steady,
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
  // column}) as the chart's rows: its stored fields, and the two rates it plots from them by
  // engine.serving.steady.front_point's divisions, in the same order (so the build's bits): tokens/s
  // per GPU = batch / tpot_s / n_gpus, per user = 1 / tpot_s (tpot_s: the steady state's mean TPOT)
  function frontRows(t) {
    var n = t.values.length ? t.values[0].length : 0, rows = [];
    for (var k = 0; k < n; k++) {
      var o = {};
      t.columns.forEach(function (c, i) { o[c] = t.values[i][k]; });
      o.tokens_per_s_per_gpu = o.batch / o.tpot_s / o.n_gpus;
      o.tokens_per_s_per_user = 1 / o.tpot_s;
      rows.push(o);
    }
    return rows;
  }
  // an upper bound of a config's capacity from index.json alone (no working set, no reserve: both are
  // >= 0), so a caller can skip fetching configs that cannot hold a batch without dropping one that can
  function roomBound(o, p) {
    var cfg = model.configs[o.cfg], gpu = model.gpus[o.gpu];
    var kvDev = ev(cfg.kv_dev, { length: p.input + p.output, kv_bytes: model.kv_bytes[o.kv_dtype] });
    return fitCount(gpu.hbm_bytes * model.hbm_fraction - cfg.weight_bytes_per_gpu, kvDev) * cfg.dp_attn;
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
