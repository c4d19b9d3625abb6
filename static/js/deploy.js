// Deployment explorer at any prompt length, output length and batch. The selection lives in the URL
// query. Numbers come from the selected structure's formula trees (data/deploy/<model>/<config>.json.gz
// and the model's common.json.gz, written by engine/batch/deploy_export.py, split by
// site_builder/data.py split_formulas), evaluated by static/js/deploy_eval.js (the rules of
// engine/deploy/sol.py summarize()); this file is the page around them.
(function () {
  "use strict";
  var page = window.ARCH_PAGE, root = document.documentElement.getAttribute("data-root") || "";
  var base = root + "data/deploy/" + page.slug + "/";
  var form = document.getElementById("pick"), fmt = window.archFmt, index = null, model = null;
  var params = new URLSearchParams(location.search);
  var MAX_TOKENS = 16777216;
  function fill(select, values, current) {
    select.textContent = "";
    values.forEach(function (v) { var o = document.createElement("option"); o.value = String(v); o.textContent = String(v); select.appendChild(o); });
    if (current !== null && values.map(String).indexOf(String(current)) >= 0) select.value = String(current);
  }
  function suggest(id, values) {
    var list = document.getElementById(id); list.textContent = "";
    values.forEach(function (v) { var o = document.createElement("option"); o.value = String(v); list.appendChild(o); });
  }
  function uniq(list) { var s = {}, out = []; list.forEach(function (v) { if (!s[v]) { s[v] = 1; out.push(v); } }); return out; }
  function cfgLabel(o) { return o.n_gpus + "x " + o.config; }
  var KEYS = ["gpu", "cfg", "fw", "kv", "input", "output", "batch"];   // + "mtp", "acc" for a model with MTP modules
  function state() { var s = {}; KEYS.forEach(function (k) { s[k] = form.elements[k].value; }); return s; }
  function sync() { var s = state(), q = new URLSearchParams(s); history.replaceState(null, "", "?" + q.toString()); return s; }
  // a whole number in [low, high] (engine/deploy/structure.py Scenario's bounds), else null
  function count(text, low, high) { var n = Number(text); return text !== "" && Number.isInteger(n) && n >= low && n <= high ? n : null; }

  // the engine's rules (static/js/deploy_eval.js): summary and per-op rows at any point
  var E = window.archDeployEval(root, page.slug), summarize = E.summarize, opRows = E.opRows, fileOf = E.file;
  window.archDeploy = { at: E.at };   // for tests and tools

  // ---- the page --------------------------------------------------------------------------------
  // formula: a string, or [text, {name: value shown}] for the tooltip's "where" line
  function row(label, value, text, doc, formula) {
    var f = Array.isArray(formula) ? formula[0] : formula, dims = Array.isArray(formula) ? formula[1] : null;
    var dt = document.createElement("dt"); dt.textContent = label;
    var dd = document.createElement("dd"); dd.appendChild(window.archNum(value, text, f || null, null, f ? null : doc, dims));
    return [dt, dd];
  }
  // The summary cards' rules (engine/deploy/sol.py's docstring) with the values this point takes in
  // them: display of what deploy_eval.js computed, nothing recomputed here.
  function cardFormulas(d) {
    var pre = d.phases.prefill, dec = d.phases.decode;
    return {
      fits: ["ceil(batch / dp_attn) <= capacity_per_rank", { batch: d.batch, dp_attn: d.dp_attn, capacity_per_rank: d.capacity_per_rank }],
      ttft_s: [d.pp > 1 ? "(prefill_steps * prefill_step + (pp - 1) * largest_step) / pp" : "prefill_steps * prefill_step",
               { prefill_steps: d.prefill_steps, prefill_step: fmt.time(pre.step_time_s), pp: d.pp, largest_step: fmt.time(d.fill_step_s) }],
      ttft_bound_s: [d.pp > 1 ? "(prefill_steps * prefill_bound + (pp - 1) * largest_step_bound) / pp" : "prefill_steps * prefill_bound",
                     { prefill_steps: d.prefill_steps, prefill_bound: fmt.time(pre.step_bound_s), pp: d.pp, largest_step_bound: fmt.time(d.fill_bound_s) }],
      tpot_bound_s: [(d.mtp_tokens ? "decode_bound / E, " : "") + "decode_bound = max(sum of flops / peak, sum of bytes / hbm_bw, per link sum of link_bytes / link_bw + calls * alpha)",
                     { decode_bound: fmt.time(dec.step_bound_s), compute: fmt.time(dec.compute_time_s), memory: fmt.time(dec.memory_time_s),
                       comm: fmt.time(dec.comm_time_s) }],
      tpot_s: [d.overlap === "two_batch"
               ? "decode_step = max(2 x kernels, 2 x collectives of a half-batch, decode_bound): two-batch overlap"
               : "decode_step = sum over its kernels of max(flops / peak, bytes / hbm_bw, link_bytes / link_bw + calls * alpha)",
               { decode_step: fmt.time(dec.step_time_s), flops: fmt.si(dec.flops, "FLOP"), bytes: fmt.bytes(dec.bytes),
                 hbm_bw: fmt.bytes(d.hbm_bytes_per_s) + "/s", link_bytes: fmt.bytes(dec.comm_bytes) }],
      // speculative decoding with MTP (sol.summarize): a step emits E tokens per request on average
      tpot_mtp: ["decode_step / E, E = " + model.tokens_per_step,
                 { decode_step: fmt.time(d.decode_step_time_s), E: d.tokens_per_step.toPrecision(6),
                   mtp_acceptance: d.mtp_acceptance, mtp_tokens: d.mtp_tokens }],
      tokens_per_s_per_user: ["1 / tpot", { tpot: fmt.time(d.tpot_s) }],
      tokens_per_s_per_user_steady: ["1 / tpot_mean", { tpot_mean: fmt.time(d.tpot_mean_s) }],
      fits_steady: ["ceil(batch / dp_attn) <= capacity_steady_per_rank", { batch: d.batch, dp_attn: d.dp_attn, capacity_steady_per_rank: d.capacity_steady_per_rank }],
      tokens_per_s_per_gpu: ["batch / tpot / gpus", { batch: d.batch, tpot: fmt.time(d.tpot_s), gpus: d.gpus_per_replica }],
      max_concurrent_requests: ["dp_attn * floor((usable - weights - reserve - working_set) / kv_per_request_per_gpu)",
        { dp_attn: d.dp_attn, usable: fmt.bytes(d.usable_bytes_per_gpu), weights: fmt.bytes(d.weight_bytes_per_gpu),
          reserve: fmt.bytes(d.reserve_bytes_per_gpu), working_set: fmt.bytes(d.activation_bytes_per_gpu),
          kv_per_request_per_gpu: fmt.bytes(d.kv_bytes_per_request_per_gpu) }],
      // steady state under continuous batching (engine/deploy/admission.py): display of deploy_eval's values
      max_concurrent_requests_steady: ["dp_attn * floor((1 - free_fraction) * kv_budget / kv_per_request_steady_per_gpu), kv at steady_tokens",
        { dp_attn: d.dp_attn, free_fraction: d.admission.free_fraction, kv_budget: fmt.bytes(d.kv_budget_bytes_per_gpu),
          kv_per_request_steady_per_gpu: fmt.bytes(d.kv_bytes_per_request_steady_per_gpu),
          steady_tokens: d.kv_steady_tokens_per_request.toPrecision(6), page_tokens: d.admission.page_tokens }],
      tpot_mean_s: [(d.mtp_tokens ? "decode_step_mean / E, " : "decode_step_mean, ") + "the decode step at ctx = input + (output - 1) / 2",
                    { decode_step_mean: fmt.time(d.decode_mean_step_time_s), E: d.tokens_per_step }],
      tokens_per_s_per_gpu_steady: ["batch / tpot_mean / gpus", { batch: d.batch, tpot_mean: fmt.time(d.tpot_mean_s), gpus: d.gpus_per_replica }]
    };
  }
  function link(o, s, cap) {
    var q = new URLSearchParams(Object.assign({}, s, { gpu: o.gpu, cfg: cfgLabel(o), fw: o.framework, kv: o.kv_dtype }));
    var a = document.createElement("a"); a.href = "?" + q.toString();
    a.textContent = o.gpu + " " + cfgLabel(o) + " (capacity " + cap + ")"; return a;
  }
  // The batch is over this config's capacity: say so with its max_concurrent_requests, and list the
  // configs (this GPU first, else the others) whose capacity at this point holds the batch.
  function overCapacity(s, p, dec) {
    var box = document.getElementById("capacity"); box.textContent = "";
    if (dec.fits) return Promise.resolve();
    var w = document.createElement("p"); w.className = "warn";
    var at = fmt.tokens(p.input) + " prompt tokens + " + fmt.tokens(p.output) + " generated";
    w.textContent = "Batch " + p.batch + " exceeds this config's capacity of " + dec.max_concurrent_requests + " requests at " + at + " (max concurrent requests: weights, the prefill working set and every request's KV at its last token must fit)." +
      (dec.fits_steady ? " It fits the steady state of continuous batching (capacity " + dec.max_concurrent_requests_steady + ": requests at every stage of their output, paged KV)." : "");
    box.appendChild(w);
    // capacity at this very point, per config (its file fetched when first needed): this GPU's
    // configs first, the other GPUs' only when none of this GPU's holds the batch
    // A config whose KV room before the working set cannot hold the batch is skipped unfetched (the
    // working set is >= 0, so this bound from index.json alone never drops a config that holds it).
    var mine = index.options.filter(function (o) {
      return o.file && o.framework === s.fw && o.kv_dtype === s.kv && E.roomBound(o, p) >= p.batch;
    });
    function holders(list) {
      return Promise.all(list.map(function (o) {
        return fileOf(o).then(function (file) { var r = summarize(o, file, p); return { o: o, cap: r.max_concurrent_requests, fits: r.fits }; });
      })).then(function (all) { return all.filter(function (x) { return x.fits; }); });
    }
    var order = function (a, b) { return a.o.n_gpus - b.o.n_gpus || a.cap - b.cap; };
    return holders(mine.filter(function (o) { return o.gpu === s.gpu; })).then(function (here) {
      return here.length ? [here, true] : holders(mine.filter(function (o) { return o.gpu !== s.gpu; })).then(function (other) { return [other, false]; });
    }).then(function (found) {
      if (JSON.stringify(state()) !== JSON.stringify(s)) return;     // a newer selection took over
      var list = found[0].sort(order), here = found[1] && list.length;
      var q = document.createElement("p"); q.id = "holders";
      if (!list.length) { q.textContent = "No evaluated config holds batch " + p.batch + " at this prompt length."; box.appendChild(q); return; }
      q.textContent = "Configs " + (here ? "on " + s.gpu : "on other GPUs") + " that hold batch " + p.batch + ": ";
      var ul = document.createElement("ul"); ul.className = "holders";
      list.slice(0, 12).forEach(function (x) { var li = document.createElement("li"); li.appendChild(link(x.o, s, x.cap)); ul.appendChild(li); });
      box.appendChild(q); box.appendChild(ul);
    });
  }
  function render(dec, combo) {
    var sum = document.getElementById("summary"); sum.textContent = "";
    var docs = page.docs, dl = document.createElement("dl"); dl.className = "cards";
    var f = cardFormulas(dec);
    // The steady state of continuous batching first (the basis of every front, FRONT_BASIS: the
    // decode step at the output's mean context, the steady-state capacity), each with its worst case
    // (every request at its last token) beside it; then TTFT, the weights and the KV.
    var items = [
      ["Fits, steady state", dec.fits_steady ? 1 : 0, dec.fits_steady ? "yes" : "no — over the steady-state capacity of " + dec.max_concurrent_requests_steady, docs.fits_steady, f.fits_steady],
      ["Fits, worst case", dec.fits ? 1 : 0, dec.fits ? "yes" : "no — short by " + fmt.bytes(dec.shortfall_bytes) + " per GPU", docs.fits, f.fits],
      ["Max concurrent requests, steady state", dec.max_concurrent_requests_steady, String(dec.max_concurrent_requests_steady), docs.max_concurrent_requests_steady, f.max_concurrent_requests_steady],
      ["Max concurrent requests, worst case", dec.max_concurrent_requests, String(dec.max_concurrent_requests), docs.max_concurrent_requests, f.max_concurrent_requests],
      ["TPOT, mean over the output", dec.tpot_mean_s, fmt.time(dec.tpot_mean_s), docs.tpot_mean_s, f.tpot_mean_s],
      ["TPOT, last token", dec.tpot_s, fmt.time(dec.tpot_s), docs.tpot_s, dec.mtp_tokens ? f.tpot_mtp : f.tpot_s],
      // the lower bounds beside the schedule estimates (docs/deployment.md "Two times per point")
      ["TPOT mean lower bound", dec.tpot_mean_bound_s, fmt.time(dec.tpot_mean_bound_s), docs.tpot_mean_bound_s],
      ["TPOT last token lower bound", dec.tpot_bound_s, fmt.time(dec.tpot_bound_s), docs.tpot_bound_s, f.tpot_bound_s],
      ["Decode tokens/s per GPU, steady state", dec.tokens_per_s_per_gpu_steady, dec.tokens_per_s_per_gpu_steady.toPrecision(4), docs.tokens_per_s_per_gpu_steady, f.tokens_per_s_per_gpu_steady],
      ["Decode tokens/s per GPU, worst case", dec.tokens_per_s_per_gpu, dec.tokens_per_s_per_gpu.toPrecision(4), docs.tokens_per_s_per_gpu, f.tokens_per_s_per_gpu],
      ["Tokens/s per user, steady state", dec.tokens_per_s_per_user_steady, dec.tokens_per_s_per_user_steady.toPrecision(4), null, f.tokens_per_s_per_user_steady],
      ["Tokens/s per user, last token", dec.tokens_per_s_per_user, dec.tokens_per_s_per_user.toPrecision(4), null, f.tokens_per_s_per_user],
      ["TTFT", dec.ttft_s, fmt.time(dec.ttft_s), docs.ttft_s, f.ttft_s],
      ["TTFT lower bound", dec.ttft_bound_s, fmt.time(dec.ttft_bound_s), docs.ttft_bound_s, f.ttft_bound_s]];
    // the expected times from measured kernels beside them (each step's lookup node, at this very
    // point): the steady TPOT's first, as above
    if (isFinite(dec.ttft_expected_s))
      items.push(["TPOT mean expected", dec.tpot_mean_expected_s, isFinite(dec.tpot_mean_expected_s) ? fmt.time(dec.tpot_mean_expected_s) : "\u2014", docs.tpot_mean_expected_s],
                 ["TPOT last token expected", dec.tpot_expected_s, fmt.time(dec.tpot_expected_s), docs.tpot_expected_s],
                 ["TTFT expected", dec.ttft_expected_s, fmt.time(dec.ttft_expected_s), docs.ttft_expected_s]);
    if (dec.mtp_tokens)   // the step: the main stack verifying k + 1 tokens plus k draft passes
      items.push(["Decode step", dec.decode_step_time_s, fmt.time(dec.decode_step_time_s), docs.decode_step_time_s || docs.tpot_s, f.tpot_s]);
    items = items.concat([
      ["Weights per GPU", dec.weight_bytes_per_gpu, fmt.bytes(dec.weight_bytes_per_gpu), docs.weight_bytes_per_gpu, dec.weight_formula || index.weight_formulas[combo.weight_formula]],
      ["KV per request", dec.kv_bytes_per_request, fmt.bytes(dec.kv_bytes_per_request), docs.kv_bytes_per_request]]);
    if (dec.kv_state_bytes_per_request > 0)   // a hybrid: how much of it is the flat recurrent state
      items.push(["of which flat state", dec.kv_state_bytes_per_request, fmt.bytes(dec.kv_state_bytes_per_request), docs.kv_state_bytes_per_request]);
    items = items.concat([["Decode bound", 0, dec.bound, docs.bound], ["Prefill bound", 0, dec.prefill_bound || "—", docs.bound]]);
    items.forEach(function (it) { var d = document.createElement("div"); row(it[0], it[1], it[2], it[3], it[4]).forEach(function (e) { d.appendChild(e); }); dl.appendChild(d); });
    sum.appendChild(dl);
    if (dec.extrapolated) { var w = document.createElement("p"); w.className = "warn"; w.textContent = "! Context past the model's maximum (" + page.max_context + " tokens): extrapolation."; sum.appendChild(w); }
    var bar = document.getElementById("membar"), usable = dec.usable_bytes_per_gpu;
    memoryBar(bar, [["weights", dec.weight_bytes_per_gpu], ["prefill", dec.activation_bytes_per_gpu], ["KV", dec.kv_bytes_per_gpu], ["free", dec.free_bytes_per_gpu]], usable);
    bar.setAttribute("aria-label", "memory per GPU: weights " + fmt.bytes(dec.weight_bytes_per_gpu) + ", prefill working set " + fmt.bytes(dec.activation_bytes_per_gpu) + ", KV " + fmt.bytes(dec.kv_bytes_per_gpu) + " of " + fmt.bytes(usable) + " usable");
  }
  // The memory bar: one segment per part, its width exactly its share of the usable bytes (a batch
  // over capacity needs more than usable: its KV fills the rest of the bar). A label that does not
  // fit inside its segment is set below the bar instead, one line per such label, so that no
  // segment is widened to hold its text.
  function memoryBar(bar, parts, usable) {
    bar.textContent = ""; bar.style.display = "";
    var left = 100;
    parts.forEach(function (p) {
      var seg = document.createElement("div"), label = document.createElement("span"), width = Math.max(0, Math.min(left, 100 * p[1] / usable));
      left -= width;
      seg.className = "seg seg-" + p[0]; seg.style.width = width + "%"; seg.setAttribute("data-bytes", String(p[1]));
      label.className = "seg-label"; label.textContent = p[0] + " " + fmt.bytes(p[1]);
      seg.appendChild(label); bar.appendChild(seg);
    });
    placeLabels(bar);
    if (window.ResizeObserver && !bar.archWatched) { bar.archWatched = true; new ResizeObserver(function () { placeLabels(bar); }).observe(bar); }
  }
  function placeLabels(bar) {
    var out = 0, line = 18, room = bar.clientWidth;
    Array.prototype.forEach.call(bar.querySelectorAll(".seg"), function (seg) {
      var label = seg.firstChild;
      seg.classList.remove("label-out"); label.style.left = ""; label.style.top = "";
      if (label.offsetWidth <= seg.clientWidth) return;
      seg.classList.add("label-out");
      label.style.left = Math.max(0, Math.min(seg.offsetLeft, room - label.offsetWidth)) + "px";
      label.style.top = (bar.clientHeight + 4 + out * line) + "px";
      out++;
    });
    bar.style.marginBottom = (8 + out * line) + "px";
  }
  // each op's expected time from measured kernels (deploy_eval's opRows: its lookup tree at this point);
  // its tooltip the measured source: at the grid's per-op points as the results store it (the table,
  // version, measured points around it: ops.parquet's expected_src, written by the build per config as
  // data/deploy/<model>/expected-<cfg>.json.gz, site_builder/data.py expected_tips: {ops, tips,
  // points: point key -> per op of ops its index in tips or -1}), elsewhere the tables the lookup
  // read. Displayed only. expectedOps: the file as point key -> op uid -> tooltip
  var expectedFiles = {}, opsDrawn = 0;
  function expectedOps(cfg) {
    if (!expectedFiles[cfg]) expectedFiles[cfg] = window.archJSON(base + "expected-" + cfg + ".json.gz").then(function (f) {
      var out = {};
      Object.keys(f.points).forEach(function (key) {
        var tips = out[key] = {};
        f.points[key].forEach(function (t, i) { if (t >= 0) tips[f.ops[i]] = f.tips[t]; });
      });
      return out;
    }).catch(function () { return {}; });
    return expectedFiles[cfg];
  }
  function expectedTip(r) {
    return r.measured ? "measured: " + r.expected_tables.join(", ") + ", interpolated in log space at this point"
                      : "no measurement: bound / " + model.default_efficiency;
  }
  function fillExpected(cells, cfg, key, drawn) {
    var table = document.getElementById("ops");
    table.removeAttribute("data-expected-ready");
    return expectedOps(cfg).then(function (all) {
      if (drawn !== opsDrawn) return;                   // a newer selection redrew the table
      var mine = (key && all[key]) || null;
      cells.forEach(function (c) {
        var found = mine && mine[c[0].op_uid];
        c[1].textContent = isFinite(c[0].t_expected_s) ? fmt.time(c[0].t_expected_s) : "—";
        c[1].title = found || expectedTip(c[0]);
      });
      table.setAttribute("data-expected-ready", mine ? "point" : "any");
    });
  }
  // env: the decode program's point (deploy_eval's summary env: batch per micro-batch, seq, ctx, kv_bytes);
  // cfg: the option's config file key; key: the selection as expected-<cfg>.json.gz keys a grid per-op
  // point (null with MTP drafts: none there)
  function renderOps(rows, p, env, cfg, key) {
    var expectedCells = [], drawn = ++opsDrawn;
    var dims = Object.assign({}, page.bound || {}, env);   // the tooltips' "where" line
    var tbody = document.querySelector("#ops tbody"); tbody.textContent = "";
    document.getElementById("ops-note").textContent = "Decode, batch " + p.batch + ", prompt " + p.input + " + " + p.output + " generated tokens (one step at the last position; a pipeline micro-batch)." +
      (p.mtp ? " With " + p.mtp + " MTP draft token" + (p.mtp > 1 ? "s" : "") + ": the main stack verifies " + env.seq + " tokens per request, then the mtp/ ops run once per draft (their rows are all " + p.mtp + " drafts)." : "");
    var defs = [null, null, null, null, null, "FLOPs / peak of the operand dtype on this GPU", "bytes / HBM bandwidth",
                "link bytes / link bandwidth (scale-up or scale-out) + calls x per-call latency", "max(compute, memory, comm)", null];
    rows.filter(function (r) { return r.phase === "decode"; }).forEach(function (r) {
      var tr = document.createElement("tr");
      var cells = [[r.op_uid, null], [r.kind, null], [fmt.si(r.flops), r.flops_formula], [fmt.bytes(r.bytes), r.bytes_formula], [fmt.bytes(r.comm_bytes), r.comm_bytes ? r.comm_bytes_formula : null],
        [fmt.time(r.t_compute_s), null], [fmt.time(r.t_memory_s), null], [fmt.time(r.t_comm_s), null], [fmt.time(r.t_sol_s), null], [r.bound, null]];
      cells.forEach(function (c, i) { var td = document.createElement("td"); if (i >= 2 && i <= 8) td.className = "n";
        if (c[1]) td.appendChild(window.archNum(0, c[0], c[1], r.op_uid, null, dims));
        else if (defs[i]) td.appendChild(window.archNum(0, c[0], null, r.op_uid, defs[i]));
        else if (i === 0) { var code = document.createElement("code"); code.textContent = c[0]; td.appendChild(code); } else td.textContent = c[0];
        tr.appendChild(td); });
      var td = document.createElement("td"); td.className = "n expected"; td.textContent = "…";
      tr.appendChild(td); expectedCells.push([r, td]);
      if (r.kind === "comm") tr.className = "comm"; if (r.kind === "fused") tr.className = "fused";
      tbody.appendChild(tr);
    });
    fillExpected(expectedCells, cfg, key, drawn);
  }
  function chart(id, spec, datasets) {
    // the build's spec names its datasets; this selection's rows fill them (top-level "datasets")
    var filled = JSON.parse(JSON.stringify(spec));
    filled.datasets = Object.assign({}, filled.datasets || {}, datasets);
    return window.archChart("#" + id, filled)   // drawn once in view (site.js)
      .catch(function (e) { console.error("chart " + id + ": " + e); });
  }
  // throughput vs batch at the grid's prompt lengths (this output length): as the grid keeps them,
  // the batches that fit plus the capacities themselves (steady and worst case), or batch 1 when nothing fits
  // (and this point's MTP drafting, if any)
  function batchRows(o, file, p) {
    var rows = [];
    index.grid.inputs.forEach(function (input) {
      E.gridPoints(o, file, model.batches, Object.assign({}, p, { input: input })).forEach(function (point) {
        var r = point[1];
        // the steady state of continuous batching (FRONT_BASIS), the worst case beside it
        rows.push({ batch: point[0], input_len: input, tokens_per_s_per_gpu: r.tokens_per_s_per_gpu_steady, tpot_s: r.tpot_mean_s,
                    tpot_last_s: r.tpot_s, fits: r.fits_steady, fits_worst: r.fits, extrapolated: r.extrapolated });
      });
    });
    return rows;
  }
  // a rate in [0, 1] (engine.deploy.planner.validate_options' --acceptance), else null
  function rate(text) { var a = Number(text); return text !== "" && isFinite(a) && a >= 0 && a <= 1 ? a : null; }
  function point(s) {
    var p = { input: count(s.input, 1, MAX_TOKENS), output: count(s.output, 0, MAX_TOKENS), batch: count(s.batch, 1, model.max_batch) };
    if (model.mtp_modules) { p.mtp = count(s.mtp, 0, model.mtp_modules); p.acceptance = rate(s.acc); }
    return p;
  }
  function update() {
    var s = sync(), combo = index.options.filter(function (o) { return o.gpu === s.gpu && cfgLabel(o) === s.cfg && o.framework === s.fw && o.kv_dtype === s.kv; })[0];
    var note = document.getElementById("batch-note");
    if (!combo || !combo.file) { note.textContent = "No formulas were built for this selection."; return; }
    var p = point(s), bad = ["input", "output", "batch"].filter(function (k) { return p[k] === null; });
    if (bad.length) {   // Scenario's bounds: say which field, keep the last numbers shown
      note.textContent = "Enter whole numbers: prompt tokens 1 to " + MAX_TOKENS.toLocaleString("en-US") + ", output tokens 0 to " + MAX_TOKENS.toLocaleString("en-US") + ", batch 1 to " + model.max_batch.toLocaleString("en-US") + " (check " + bad.join(", ") + ").";
      return;
    }
    if (model.mtp_modules && (p.mtp === null || p.acceptance === null)) {
      note.textContent = "Enter MTP draft tokens k from 0 to " + model.mtp_modules + " and an acceptance rate a from 0 to 1.";
      return;
    }
    note.textContent = "";
    fileOf(combo).then(function (file) {
      if (JSON.stringify(state()) !== JSON.stringify(s)) return;          // a newer selection took over
      document.getElementById("dl-parquet").href = root + "downloads/deployments/model=" + page.slug + "/part.parquet";
      document.getElementById("dl-json").href = base + combo.file + ".json.gz";
      var dec = summarize(combo, file, p), ops = opRows(combo, file, dec);
      render(dec, combo);
      renderOps(ops, p, dec.env.decode, combo.cfg, p.mtp ? null : [s.gpu, combo.n_gpus, combo.config, s.fw, s.kv, p.batch, p.input, p.output].join("|"));
      window.archDeploy.current = { option: combo, point: p, summary: dec, ops: ops };
      // both phases' per-op rows of the selected point (static/js/roofline.js draws the decode step's)
      document.dispatchEvent(new CustomEvent("arch:ops", { detail: { rows: ops, gpu: s.gpu, phase: "decode" } }));
      var batches = window.archDeploy.batchRows = batchRows(combo, file, p);
      chart("chart-batch", page.specs.batch, { rows: batches });
      var best = index.best_per_gpu.filter(function (b) { return b.framework === s.fw && b.kv_dtype === s.kv; }).map(function (b) { var o = Object.assign({}, b); o.label = b.gpu + " " + b.n_gpus + "x " + b.config; return o; });
      chart("chart-gpus", page.specs.gpus, { best: best });
      chart("chart-ep", page.specs.ep, { configs: index.best.filter(function (b) { return b.gpu === s.gpu && b.n_gpus === combo.n_gpus && b.framework === s.fw && b.kv_dtype === s.kv; }) });
      // configs the build found identical on this GPU type and count, and why (site_builder/twins.py)
      document.getElementById("ep-note").textContent = (index.twins || []).filter(function (t) {
        return t.gpu === s.gpu && t.n_gpus === combo.n_gpus && t.framework === s.fw && t.kv_dtype === s.kv;
      }).map(function (t) { return t.note; }).join(" ");
      return overCapacity(s, p, dec);
    }).then(function () {   // for tests and tools: the selection whose numbers are on the page
      if (JSON.stringify(state()) === JSON.stringify(s)) document.getElementById("summary").setAttribute("data-ready", JSON.stringify(s));
      frontsOrSay(s, p);
    })
      .catch(function (e) { console.error(e); document.getElementById("summary").textContent = "Could not load the data: " + e.message; });
  }
  // The throughput/interactivity chart: each GPU type's front over every GPU count, config and
  // batch the grid evaluates at this point's prompt and output length, for this framework, KV dtype
  // and MTP drafting. At a grid point without drafting it is the build's own front (the rows
  // deployments.parquet flags on_front, engine.serving.steady.front_points): one small file,
  // data/deploy/<model>/fronts/<fw>-<kv>-<input>-<output>.json.gz. Elsewhere deploy_eval.js fronts
  // evaluates every config's formulas (every config file fetched): only once the reader picks such
  // a point. Drawn once the chart scrolls into view (site.js archWhenSeen, the watch that loads the
  // chart library), then again only when those selections change.
  function gridFront(s, p) {
    var on = !p.mtp && (index.fronts || []).some(function (k) { return k[0] === s.fw && k[1] === s.kv && k[2] === p.input && k[3] === p.output; });
    if (!on) return null;
    return window.archJSON(base + "fronts/" + [s.fw, s.kv, p.input, p.output].join("-") + ".json.gz").then(E.frontRows);
  }
  var frontKey = null, frontSeen = false, frontWanted = null, openPoint = null;
  window.archWhenSeen(document.getElementById("chart-front"), function () {
    frontSeen = true;
    if (frontWanted) frontsOrSay(frontWanted[0], frontWanted[1]);
  });
  function frontsOrSay(s, p) {    // a chart that fails says so under itself; the summary stays
    drawFronts(s, p).catch(function (e) {
      console.error(e); frontKey = null;
      document.getElementById("front-note").textContent = "Could not draw the fronts: " + e.message;
    });
  }
  function drawFronts(s, p) {
    var key = JSON.stringify([s.fw, s.kv, p.input, p.output, p.mtp, p.acceptance]), box = document.getElementById("chart-front");
    if (!frontSeen) { frontWanted = [s, p]; return Promise.resolve(); }
    if (key === frontKey) return Promise.resolve();
    frontKey = key; box.removeAttribute("data-ready");
    var options = index.options.filter(function (o) { return o.file && o.framework === s.fw && o.kv_dtype === s.kv; });
    return (gridFront(s, p) || E.fronts(options, model.batches, p)).then(function (rows) {
      if (key !== frontKey) return;                 // a newer selection took over
      window.archDeploy.fronts = rows;
      document.getElementById("front-note").textContent = rows.length ? "" : "No evaluated config serves a request at this prompt and output length.";
      return chart("chart-front", page.specs.front, { front: rows }).then(function (drawn) {
        // a click on a point opens that deployment (its GPU, config and batch at this point)
        if (drawn && drawn.view) drawn.view.addEventListener("click", function (_, item) {
          var d = item && item.datum;
          if (d && d.gpu && d.config && openPoint) openPoint(d);
        });
        if (key === frontKey) box.setAttribute("data-ready", key);
      });
    });
  }
  // the page data plus what every deploy page shares (render.DEPLOY_SHARED: chart specs, column docs, GPU figures)
  Promise.all([E.index(), window.archJSON(root + "data/deploy/page.json.gz")]).then(function (loaded) {
    var idx = loaded[0], shared = loaded[1];
    Object.assign(page.specs, shared.specs); page.docs = shared.docs; page.gpus = shared.gpus;
    index = idx; model = idx.model;
    var opts = idx.options, grid = idx.grid;
    if (model.mtp_modules) {   // speculative decoding with the model's MTP modules: k = 0 (off) .. modules
      var before = document.getElementById("inputs");
      [["MTP draft tokens k ", "select", { name: "mtp" }], ["acceptance rate a ", "input", { name: "acc", type: "number", min: "0", max: "1", step: "any", value: "0.8" }]].forEach(function (c) {
        var label = document.createElement("label"), el = document.createElement(c[1]);
        label.className = "mtp"; label.appendChild(document.createTextNode(c[0]));
        Object.keys(c[2]).forEach(function (k) { el.setAttribute(k, c[2][k]); });
        label.appendChild(el); form.insertBefore(label, before);
      });
      KEYS.push("mtp", "acc");
      fill(form.elements.mtp, Array.from({ length: model.mtp_modules + 1 }, function (_, i) { return i; }), params.get("mtp") || "0");
      if (params.get("acc") !== null) form.elements.acc.value = params.get("acc");
    }
    suggest("inputs", grid.inputs); suggest("outputs", grid.outputs); suggest("batches", grid.batches);
    fill(form.elements.gpu, uniq(opts.map(function (o) { return o.gpu; })), params.get("gpu") || "H200");
    function refill() {
      var g = form.elements.gpu.value, mine = opts.filter(function (o) { return o.gpu === g; });
      fill(form.elements.cfg, uniq(mine.map(cfgLabel)), params.get("cfg"));
      fill(form.elements.fw, uniq(mine.map(function (o) { return o.framework; })), params.get("fw") || "vllm");
      fill(form.elements.kv, uniq(mine.map(function (o) { return o.kv_dtype; })), params.get("kv") || "bf16");
    }
    refill();
    var deflt = grid.inputs.indexOf(4096) >= 0 || !grid.inputs.length ? 4096 : grid.inputs[0];
    form.elements.input.value = params.get("input") || String(deflt);
    form.elements.output.value = params.get("output") || String(idx.output_len);
    form.elements.batch.value = params.get("batch") || String(grid.batches[0] || 1);
    // a new GPU keeps the point, framework, KV dtype and (where it exists) the config
    form.elements.gpu.addEventListener("change", function () { params = new URLSearchParams(state()); refill(); update(); });
    openPoint = function (d) {      // a front point: its GPU, config and batch, the rest of the selection kept
      params = new URLSearchParams(Object.assign(state(), { gpu: d.gpu, cfg: cfgLabel(d), batch: String(d.batch) }));
      form.elements.gpu.value = d.gpu; refill(); form.elements.batch.value = String(d.batch);
      update(); window.scrollTo({ top: 0, behavior: "smooth" });
    };
    KEYS.slice(1).forEach(function (k) { form.elements[k].addEventListener("change", function () { params = new URLSearchParams(location.search); update(); }); });
    form.addEventListener("submit", function (e) { e.preventDefault(); update(); });
    update();
    chart("chart-kv", page.specs.kv, { kv: page.kv_rows, limit: [{ max_context: page.max_context }] });
  }).catch(function (e) { console.error(e); document.getElementById("summary").textContent = "Could not load the data: " + e.message; });
})();
