// Sizing form and throughput/interactivity front: selects rows of the build's data/sizing/<slug>.json.gz
// (the aggregated answer computes nothing; the disaggregated one is the port below). Per GPU type the answer is the lowest-rank sizing row whose TTFT and TPOT are
// within the bounds (engine/serving/fronts.py: plan's order, thinned where no answer can change); across
// GPU types, the fewest GPUs then the most tokens/s per GPU, as `archledger plan --json`'s "answer".
// The disaggregated answer (plan's "answer_disaggregated", one replica, no load) pairs the build's
// prefill and decode points (engine/serving/disagg_sizing.py keeps every point some answer needs) by a
// port of engine/serving/pairing.py pair_points and engine/serving/disagg.py join: the same formulas in
// the same order (so the same doubles), the same tie-breaks; the points' times are the build's.
(function () {
  "use strict";
  var ROUND = 1 - 1e-12;     // disagg.ROUND and pair_points' (1 - 1e-12): ceilings of ratios up to rounding
  // site_builder/sizing.py encode_doubles, inverted: the first double's bits, then second differences
  function decodeDoubles(enc) {
    var out = [], view = new DataView(new ArrayBuffer(8)), bits = null, step = null;
    enc.forEach(function (v, i) {
      var d = BigInt(v);
      if (i === 0) bits = d; else { step = (i === 1) ? d : step + d; bits += step; }
      view.setBigInt64(0, bits, true); out.push(view.getFloat64(0, true));
    });
    return out;
  }
  // numpy.searchsorted on an ascending array: "right" counts the values <= v, "left" those < v
  function searchsorted(arr, v, right) {
    var lo = 0, hi = arr.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (right ? arr[mid] <= v : arr[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function linkTime(link, bytes) { return link.alpha + bytes / link.bw; }     // disagg.Link.time
  // disagg.links: scale-up only within one GPU type; scale-out at the larger alpha and the smaller bandwidth
  function links(pg, dg, same) {
    return { up: same ? { alpha: pg.up[0], bw: pg.up[1] } : null,
             out: { alpha: Math.max(pg.out[0], dg.out[0]), bw: Math.min(pg.out[1], dg.out[1]) } };
  }
  function decodePoints(side) {
    if (!side._tpot) side._tpot = decodeDoubles(side.tpot);
    return side;
  }
  // pair_points + DisaggSearch.cheapest()[0] for one (prefill GPU, decode GPU) pair at bounds (a, b)
  function pairAnswer(scen, pgKey, dgKey, output, a, b) {
    var pg = scen.gpus[pgKey], dg = scen.gpus[dgKey];
    if (!pg || !dg || !pg.prefill.config.length || !dg.decode.config.length) return null;
    // the pairs the build's rule allows (engine/serving/pairing.py pair_allowed, plan's default: one vendor)
    if (pg.pairs_with && pg.pairs_with.indexOf(dgKey) < 0) return null;
    var P = pg.prefill, D = decodePoints(dg.decode), tpotD = D._tpot;
    var lk = links(pg, dg, pgKey === dgKey), n = D.config.length, nCp = P.configs.length;
    var shareD = D.configs.map(function (c) { return c[2]; });
    var xd = D.batch.map(function (bd, i) { return bd / (output * tpotD[i]); });
    var demand = xd;                 // replicas(1.0, x_d, ...)["decode_replicas"] (1, no load) x x_d
    var cost = [], ttft = [], batch = [];
    for (var c = 0; c < nCp; c++) {
      var t = [], bb = [];
      P.config.forEach(function (k, i) { if (k === c) { t.push(P.ttft[i]); bb.push(P.batch[i]); } });
      var order = t.map(function (_, i) { return i; }).sort(function (i, j) { return t[i] - t[j] || i - j; });
      t = order.map(function (i) { return t[i]; }); bb = order.map(function (i) { return bb[i]; });
      var best = [], arg = [], run = -Infinity, at = 0;
      for (var i = 0; i < t.length; i++) { var x = bb[i] / t[i]; if (x > run) { run = x; at = i; } best.push(run); arg.push(at); }
      var last = shareD.map(function (sd) {
        return searchsorted(t, a - linkTime(lk.out, Math.max(P.configs[c][2], sd)), true) - 1;
      });
      var cc = [], tc = [], bc = [];
      for (var d = 0; d < n; d++) {
        var j = last[D.config[d]], ok = j >= 0, jj = Math.max(j, 0), xMax = best[jj];
        var reps = Math.max(1, Math.ceil(demand[d] / xMax * ROUND));
        var first = Math.min(searchsorted(best, demand[d] / reps * ROUND, false), jj), pick = arg[first];
        cc.push(ok ? reps * P.configs[c][1] : Infinity); tc.push(t[pick]); bc.push(bb[pick]);
      }
      cost.push(cc); ttft.push(tc); batch.push(bc);
    }
    var top = null;
    for (var d2 = 0; d2 < n; d2++) {
      // of the prefill configs, the fewest GPUs, then the shortest TTFT (numpy argmin: the first minimum)
      var choice = 0, key = Infinity;
      for (var c2 = 0; c2 < nCp; c2++) {
        var k2 = cost[c2][d2] + (isFinite(cost[c2][d2]) ? ttft[c2][d2] / (2 * a) : 0);
        if (k2 < key) { key = k2; choice = c2; }
      }
      if (!isFinite(cost[choice][d2])) continue;
      var row = join(pg, dg, lk, P.configs[choice], batch[choice][d2], ttft[choice][d2], D.configs[D.config[d2]],
                     D.batch[d2], tpotD[d2], scen.kv_request, output);
      if (!(row.ttft_s <= a && row.tpot_s <= b)) continue;
      if (cheaper(row, top)) top = row;
    }
    if (top) { top.prefill_gpu = pgKey; top.decode_gpu = dgKey; }
    return top;
  }
  // plan's cheapest: fewest GPUs, then the most tokens/s/GPU; on a tie the first one seen stays
  function cheaper(row, top) {
    return !top || row.total_gpus < top.total_gpus ||
      (row.total_gpus === top.total_gpus && row.tokens_per_s_per_gpu > top.tokens_per_s_per_gpu);
  }
  // disagg.join and disagg.replicas for one (prefill point, decode point), one decode replica
  function join(pg, dg, lk, pc, batchP, ttftP, dc, batchD, tpotD, kvRequest, output) {
    var xp = batchP / ttftP, xd = batchD / (output * tpotD);
    var decode = 1, prefill = Math.max(1, Math.ceil(decode * xd / xp * ROUND));
    var rps = Math.min(prefill * xp, decode * xd);
    var total = prefill * pc[1] + decode * dc[1], linkBytes = Math.max(pc[2], dc[2]);
    var onUp = lk.up !== null && total <= pg.domain;
    var seconds = onUp ? linkTime(lk.up, linkBytes) : linkTime(lk.out, linkBytes), tokens = rps * output;
    var price = (pg.price !== null && dg.price !== null) ? prefill * pc[1] * pg.price + decode * dc[1] * dg.price : null;
    return { prefill_config: pc[0], prefill_n_gpus: pc[1], prefill_batch: batchP, prefill_replicas: prefill,
             prefill_ttft_s: ttftP, prefill_requests_per_s: xp, decode_config: dc[0], decode_n_gpus: dc[1],
             decode_batch: batchD, decode_replicas: decode, decode_requests_per_s: xd, pool_ratio: xd / xp,
             kv_transfer_bytes: kvRequest, kv_link_bytes: linkBytes, kv_link: onUp ? "scale_up" : "scale_out",
             kv_transfer_s: seconds, total_gpus: total, ttft_s: ttftP + seconds, tpot_s: tpotD,
             tokens_per_s_per_gpu: tokens / total, tokens_per_s_per_user: 1 / tpotD, requests_per_s: rps,
             usd_per_hour: price, usd_per_m_tokens: price === null ? null : price / (tokens * 3600) * 1e6 };
  }
  // plan's answer_disaggregated: every ordered pair of the picked GPU types (prefill outer, in the
  // build's GPU order), the fewest GPUs, then the most tokens/s/GPU, the first pair on a tie
  function disaggAnswer(s, sc, b) {
    var scen = (data.disagg || {})[[s.fw, s.kv, sc.input, sc.output].join("/")];
    if (!scen) return undefined;
    var top = null;
    s.gpu.forEach(function (p) {
      s.gpu.forEach(function (d) {
        var r = pairAnswer(scen, p, d, sc.output, b.ttft, b.tpot);
        if (r && cheaper(r, top)) top = r;
      });
    });
    return top;
  }
  // the pure rules are exported for tests/test_hand_browser.py (hand values on made-up inputs)
  window.archSizing = { decodeDoubles: decodeDoubles, links: links, join: join, pairAnswer: pairAnswer };
  var page = window.ARCH_PAGE, root = document.documentElement.getAttribute("data-root") || "";
  var form = document.getElementById("sizing"), fmt = window.archFmt, data = null;
  // rows of one (framework, KV dtype, scenario, GPU) in rank order, as objects
  function records(table, columns, s, sc, gpu) {
    var rows = table[[s.fw, s.kv, sc.input, sc.output, gpu].join("/")] || [];
    return rows.map(function (r) { var o = { gpu: gpu, framework: s.fw, kv_dtype: s.kv }; columns.forEach(function (c, i) { o[c] = r[i]; }); return o; });
  }
  function state() {
    var s = { scenario: form.elements.scenario.value, fw: form.elements.fw.value, kv: form.elements.kv.value,
              ttft: form.elements.ttft.value, tpot: form.elements.tpot.value, gpu: [] };
    Array.prototype.forEach.call(form.querySelectorAll("input[name=gpu]"), function (c) { if (c.checked) s.gpu.push(c.value); });
    return s;
  }
  function restore() {
    var q = new URLSearchParams(location.search);
    ["scenario", "fw", "kv", "ttft", "tpot"].forEach(function (k) {
      var v = q.get(k), el = form.elements[k];
      if (v === null) return;
      if (el.tagName === "SELECT" && !Array.prototype.some.call(el.options, function (o) { return o.value === v; })) return;
      el.value = v;
    });
    if (q.has("gpu")) {
      var want = q.getAll("gpu");
      Array.prototype.forEach.call(form.querySelectorAll("input[name=gpu]"), function (c) { c.checked = want.indexOf(c.value) >= 0; });
    }
  }
  function sync(s) {
    var q = new URLSearchParams();
    ["scenario", "fw", "kv", "ttft", "tpot"].forEach(function (k) { q.set(k, s[k]); });
    s.gpu.forEach(function (g) { q.append("gpu", g); });
    history.replaceState(null, "", "?" + q.toString());
  }
  function scenarioOf(s) { var p = s.scenario.split("/"); return { input: Number(p[0]), output: Number(p[1]) }; }
  // the bounds in seconds: TTFT typed in s, TPOT in ms (50 / 1000 is the same double as 0.05)
  function bounds(s) { return { ttft: Number(s.ttft), tpot: Number(s.tpot) / 1000 }; }
  function deployLink(r, sc) {
    var q = new URLSearchParams({ gpu: r.gpu, cfg: r.n_gpus + "x " + r.config, fw: r.framework, kv: r.kv_dtype,
                                  input: String(sc.input), batch: String(r.batch) });
    var a = document.createElement("a"); a.href = root + "models/" + page.slug + "/deploy/?" + q.toString();
    a.textContent = "open"; return a;
  }
  function cell(tr, text, cls) { var td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
  // The answer's lower bounds beside its estimates: the deploy page's own evaluation of that point
  // (deploy_eval.js over the model's exported formulas), when the grid exported its config.
  var boundAsked = 0;
  function showBound(top, sc, s) {
    if (!window.archDeployEval) return;
    var asked = ++boundAsked, E = window.archDeployEval(root, page.slug);
    E.index().then(function (idx) {
      var o = idx.options.filter(function (x) { return x.file && x.gpu === top.gpu && x.n_gpus === top.n_gpus && x.config === top.config &&
                                                       x.framework === s.fw && x.kv_dtype === s.kv; })[0];
      if (!o) return null;
      return E.at(o, { input: sc.input, output: sc.output, batch: top.batch });
    }).then(function (d) {
      if (asked !== boundAsked) return;
      var out = document.getElementById("sizing-answer");
      if (!d) {       // the grid's deploy page does not hold this config, framework or KV dtype
        out.setAttribute("data-ttft-bound", ""); out.setAttribute("data-tpot-bound", "");
        out.textContent += " (Its lower bound: archledger deploy at this point; the deploy page's grid does not hold this config.)";
        return;
      }
      // the answer's TPOT is the steady state's (the output's mean context): its bound is that step's
      out.setAttribute("data-ttft-bound", d.ttft_bound_s); out.setAttribute("data-tpot-bound", d.tpot_mean_bound_s);
      out.textContent += " Lower bound at this point (what no schedule beats): TTFT " + fmt.time(d.ttft_bound_s) + ", TPOT " + fmt.time(d.tpot_mean_bound_s) + ".";
    }).catch(function () {});
  }
  function update() {
    var s = state(), sc = scenarioOf(s), b = bounds(s);
    sync(s);
    var answers = [], tbody = document.querySelector("#sizing-table tbody"), out = document.getElementById("sizing-answer");
    tbody.textContent = "";
    var valid = isFinite(b.ttft) && b.ttft > 0 && isFinite(b.tpot) && b.tpot > 0;
    s.gpu.forEach(function (g) {
      var best = null;
      if (valid) records(data.sizing, data.columns.sizing, s, sc, g).some(function (r) {   // rank order: the first match is plan's
        if (r.ttft_s <= b.ttft && r.tpot_s <= b.tpot) { best = r; return true; } return false;
      });
      var tr = document.createElement("tr"); tr.setAttribute("data-gpu", g);
      cell(tr, g);
      if (!best) { var td = cell(tr, valid ? "no config of this GPU type meets both bounds" : "—"); td.colSpan = 8; tbody.appendChild(tr); return; }
      answers.push(best);
      cell(tr, String(best.n_gpus), "n"); cell(tr, best.config); cell(tr, String(best.batch), "n");
      cell(tr, fmt.time(best.ttft_s), "n"); cell(tr, fmt.time(best.tpot_s), "n");
      cell(tr, fmt.si(best.tokens_per_s_per_gpu), "n"); cell(tr, fmt.si(best.tokens_per_s_per_user), "n");
      var link = document.createElement("td"); link.appendChild(deployLink(best, sc)); tr.appendChild(link);
      tbody.appendChild(tr);
    });
    // plan's "answer": the fewest GPUs over the GPU types, then the most tokens/s per GPU (first GPU on a tie)
    var top = null;
    answers.forEach(function (r) { if (!top || r.n_gpus < top.n_gpus || (r.n_gpus === top.n_gpus && r.tokens_per_s_per_gpu > top.tokens_per_s_per_gpu)) top = r; });
    out.textContent = "";
    out.setAttribute("data-gpu", top ? top.gpu : ""); out.setAttribute("data-config", top ? top.config : "");
    out.setAttribute("data-n-gpus", top ? top.n_gpus : ""); out.setAttribute("data-batch", top ? top.batch : "");
    if (!valid) out.textContent = "Give TTFT and TPOT bounds above 0.";
    else if (!s.gpu.length) out.textContent = "Pick at least one GPU type.";
    else if (!top) out.textContent = "No config of up to " + (scenarioMeta(sc).max_gpus || "") + " GPUs on " + s.gpu.join(", ") + " meets TTFT ≤ " + fmt.time(b.ttft) + " and TPOT ≤ " + fmt.time(b.tpot) + ".";
    else {
      out.textContent = "Answer: " + top.n_gpus + " " + top.gpu + " (" + top.config + ", batch " + top.batch + ": TTFT " + fmt.time(top.ttft_s) +
        ", TPOT " + fmt.time(top.tpot_s) + " (schedule estimates; TPOT in the steady state of continuous batching, the mean a request sees), " +
        fmt.si(top.tokens_per_s_per_gpu) + " tokens/s per GPU).";
      showBound(top, sc, s);
    }
    showDisagg(valid && s.gpu.length ? disaggAnswer(s, sc, b) : null, valid && s.gpu.length,
               (data.disagg || {})[[s.fw, s.kv, sc.input, sc.output].join("/")]);
    var cli = "archledger plan " + page.model_id + " --input " + sc.input + " --output " + sc.output + " --ttft " + s.ttft + " --tpot " + (Number(s.tpot) / 1000) +
      s.gpu.map(function (g) { return " --gpu " + g; }).join("") + " --framework " + s.fw + " --kv-dtype " + s.kv + " --max-gpus " + scenarioMeta(sc).max_gpus;
    document.getElementById("sizing-cli").textContent = cli;
    chart([].concat.apply([], s.gpu.map(function (g) { return records(data.front, data.columns.front, s, sc, g); })));
  }
  function gpus(n) { return n + (n === 1 ? " GPU" : " GPUs"); }
  // scen: the scenario's disaggregated data (its GPU types' prices among them)
  function showDisagg(r, asked, scen) {
    var out = document.getElementById("sizing-disagg");
    if (!out) return;
    window.archSizing.disaggregated = r || null;
    out.textContent = "";
    ["total-gpus", "prefill-gpu", "prefill-config", "prefill-batch", "prefill-replicas", "decode-gpu", "decode-config",
     "decode-batch", "decode-replicas"].forEach(function (k) {
      var v = r ? r[k.replace(/-/g, "_")] : ""; out.setAttribute("data-" + k, v === undefined ? "" : String(v));
    });
    if (r === undefined) { out.textContent = "Disaggregated serving was not precomputed for this scenario: run the command below."; return; }
    if (!asked) return;
    if (!r) { out.textContent = "Disaggregated: no split of a prefill pool and a decode pool on these GPU types meets both bounds."; return; }
    // the price the figure assumes, per GPU type of the pair (the GPU files' $/GPU-hour)
    var rates = [r.prefill_gpu, r.decode_gpu].filter(function (g, i, all) { return all.indexOf(g) === i; })
      .map(function (g) { return "$" + scen.gpus[g].price + " per " + g + "-hour"; });
    var price = r.usd_per_m_tokens === null ? "" : ", $" + Number(r.usd_per_m_tokens.toPrecision(3)) +
      " per million output tokens at " + rates.join(" and ") + " (the GPU files' prices)";
    out.textContent = "Disaggregated: " + gpus(r.total_gpus) + ": " + r.prefill_replicas + " × " + r.prefill_gpu + " " +
      r.prefill_config + " prefilling " + r.prefill_batch + (r.prefill_batch === 1 ? " prompt" : " prompts") + " at once (" + gpus(r.prefill_n_gpus) + " each) + " +
      r.decode_replicas + " × " + r.decode_gpu + " " + r.decode_config + " decoding a batch of " + r.decode_batch + " (" +
      gpus(r.decode_n_gpus) + " each); pool ratio " + fmt.si(r.pool_ratio) + " prefill replicas per decode replica; TTFT " +
      fmt.time(r.ttft_s) + " incl. KV transfer " + fmt.time(r.kv_transfer_s) + " (" + r.kv_link.replace("_", "-") + "), TPOT " +
      fmt.time(r.tpot_s) + ", " + fmt.si(r.tokens_per_s_per_gpu) + " tokens/s per GPU" + price + ".";
  }
  function scenarioMeta(sc) { return data.scenarios.filter(function (x) { return x.input_len === sc.input && x.output_len === sc.output; })[0] || {}; }
  function chart(rows) {
    var el = document.getElementById("chart-front");
    if (!el) return;
    if (!rows.length) {        // nothing to draw (no GPU type picked): say so, no empty chart and its warnings
      window.archChart(el, null); el.textContent = "Pick a GPU type above to draw its front.";
      return;
    }
    var spec = JSON.parse(JSON.stringify(page.specs.front));
    spec.datasets = Object.assign({}, spec.datasets || {}, { front: rows });
    window.archChart("#chart-front", spec)
      .catch(function (e) { console.error("chart front: " + e); });
  }
  restore();
  // this model's rows, and the chart spec every deploy and sizing page shares (render.DEPLOY_SHARED)
  Promise.all([window.archJSON(root + "data/sizing/" + page.slug + ".json.gz"), window.archJSON(root + "data/deploy/page.json.gz")])   // site.js: gzip-aware
    .then(function (loaded) {
      data = loaded[0]; page.specs = { front: loaded[1].specs.front };
      form.addEventListener("input", update); form.addEventListener("change", update); update();
    })
    .catch(function (e) { document.getElementById("sizing-answer").textContent = "Could not load the sizing data (" + e.message + ")."; });
})();
