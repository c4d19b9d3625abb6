// Sizing form and throughput/interactivity front: selects rows of the build's data/sizing/<slug>.json.gz
// (the aggregated answer computes nothing). Per GPU type the answer is the lowest-rank sizing row whose
// TTFT and TPOT are within the bounds (engine/serving/fronts.py: plan's order, thinned where no answer
// can change); across GPU types, the fewest GPUs then the most tokens/s per GPU, as `archledger plan
// --json`'s "answer". The disaggregated answer (plan's "answer_disaggregated", one replica, no load)
// pairs the build's prefill and decode points (engine/serving/disagg_sizing.py keeps every point some
// answer needs) by engine/serving/rules.py's programs (the page data's "rules": links, transfer,
// demand, last, choice, join), run by the one interpreter (formula.js): this file is page glue that
// gathers their inputs and keeps plan's tie-breaks (comparisons only); the points' times and each
// prefill config's staircase (engine.serving.pairing.staircase) are the build's.
(function () {
  "use strict";
  var F = window.archFormula, R = null;      // R: engine/serving/rules.py's programs (data.rules)
  function run(name, env) { return F.run(R[name], env); }
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
  // rules.LINKS: scale-up only within one GPU type; scale-out at the larger alpha and the smaller bandwidth
  function links(pg, dg, same) {
    var o = run("links", { p_out_alpha: pg.out[0], d_out_alpha: dg.out[0], p_out_bw: pg.out[1], d_out_bw: dg.out[1] });
    return { up: same ? { alpha: pg.up[0], bw: pg.up[1] } : null, out: { alpha: o.out_alpha, bw: o.out_bw } };
  }
  function decodePoints(side) {
    if (!side._tpot) side._tpot = decodeDoubles(side.tpot);
    return side;
  }
  var NO_LOAD = { users: 0, has_users: 0, rate: 0, has_rate: 0 };   // plan's page answer: one decode replica
  // pairing.pair_points + DisaggSearch.cheapest()[0] for one (prefill GPU, decode GPU) pair at bounds (a, b)
  function pairAnswer(scen, pgKey, dgKey, output, a, b) {
    var pg = scen.gpus[pgKey], dg = scen.gpus[dgKey];
    if (!pg || !dg || !pg.prefill.config.length || !dg.decode.config.length) return null;
    // the pairs the build's rule allows (engine/serving/pairing.py pair_allowed, plan's default: one vendor)
    if (pg.pairs_with && pg.pairs_with.indexOf(dgKey) < 0) return null;
    var P = pg.prefill, D = decodePoints(dg.decode), tpotD = D._tpot;
    var lk = links(pg, dg, pgKey === dgKey), half = run("half", { bound: a }).half, top = null;
    for (var d = 0; d < D.config.length; d++) {
      var dc = D.configs[D.config[d]];
      var demand = run("demand", Object.assign({ batch_d: D.batch[d], output: output, tpot_d: tpotD[d] }, NO_LOAD)).demand;
      // of the prefill configs with a point within the bound: the least key (rules.CHOICE), the first on a tie
      var pick = null, pickAt = -1;
      for (var c = 0; c < P.configs.length; c++) {
        var st = P.stairs[c], pc = P.configs[c];
        var seconds = run("transfer", { share_p: pc[2], share_d: dc[2], alpha: lk.out.alpha, bw: lk.out.bw }).seconds;
        var last = st[0].length ? run("last", { t: st[0], bound: a, seconds: seconds }).last : -1;
        if (last < 0) continue;
        var ch = run("choice", { t: st[0], b: st[1], best: st[2], arg: st[3], demand: demand, j: last, half: half, n_p: pc[1] });
        if (pick === null || ch.key < pick.key) { pick = ch; pickAt = c; }
      }
      if (pick === null) continue;
      var row = join(pg, dg, lk, P.configs[pickAt], pick.batch, pick.ttft, dc, D.batch[d], tpotD[d], scen.kv_request, output);
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
  // rules.JOINED (disagg.join and disagg.replicas) for one (prefill point, decode point), one decode replica
  function join(pg, dg, lk, pc, batchP, ttftP, dc, batchD, tpotD, kvRequest, output) {
    var priced = pg.price !== null && dg.price !== null;
    var r = run("join", Object.assign({ batch_p: batchP, ttft_p: ttftP, batch_d: batchD, tpot_d: tpotD, output: output,
      n_p: pc[1], n_d: dc[1], share_p: pc[2], share_d: dc[2], has_up: lk.up !== null ? 1 : 0, domain: pg.domain,
      up_alpha: lk.up ? lk.up.alpha : 0, up_bw: lk.up ? lk.up.bw : 1, out_alpha: lk.out.alpha, out_bw: lk.out.bw,
      price_p: priced ? pg.price : 0, price_d: priced ? dg.price : 0 }, NO_LOAD));
    return { prefill_config: pc[0], prefill_n_gpus: pc[1], prefill_batch: batchP, prefill_replicas: r.prefill_replicas,
             prefill_ttft_s: ttftP, prefill_requests_per_s: r.x_p, decode_config: dc[0], decode_n_gpus: dc[1],
             decode_batch: batchD, decode_replicas: r.decode_replicas, decode_requests_per_s: r.x_d, pool_ratio: r.pool_ratio,
             kv_transfer_bytes: kvRequest, kv_link_bytes: r.kv_link_bytes, kv_link: r.on_up ? "scale_up" : "scale_out",
             kv_transfer_s: r.kv_transfer_s, total_gpus: r.total_gpus, ttft_s: r.ttft_s, tpot_s: tpotD,
             tokens_per_s_per_gpu: r.tokens_per_s_per_gpu, tokens_per_s_per_user: r.tokens_per_s_per_user,
             requests_per_s: r.requests_per_s, usd_per_hour: priced ? r.usd_per_hour : null,
             usd_per_m_tokens: priced ? r.usd_per_m_tokens : null };
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
  window.archSizing = { decodeDoubles: decodeDoubles, links: links, join: join, pairAnswer: pairAnswer,
                        useRules: function (rules) { R = rules; } };
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
    boundAsked++;      // a bound still being computed belongs to the answer this one replaces: it must not land here
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
      data = loaded[0]; R = data.rules; page.specs = { front: loaded[1].specs.front };
      form.addEventListener("input", update); form.addEventListener("change", update); update();
    })
    .catch(function (e) { document.getElementById("sizing-answer").textContent = "Could not load the sizing data (" + e.message + ")."; });
})();
