// Sizing form and throughput/interactivity front: selects rows of the build's data/sizing/<slug>.json.gz,
// never computes a cost. Per GPU type the answer is the lowest-rank sizing row whose TTFT and TPOT are
// within the bounds (engine/build/fronts.py: plan's order, thinned where no answer can change); across
// GPU types, the fewest GPUs then the most tokens/s per GPU, as `archledger plan --json`'s "answer".
(function () {
  "use strict";
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
    else out.textContent = "Answer: " + top.n_gpus + " " + top.gpu + " (" + top.config + ", batch " + top.batch + ": TTFT " + fmt.time(top.ttft_s) +
      ", TPOT " + fmt.time(top.tpot_s) + ", " + fmt.si(top.tokens_per_s_per_gpu) + " tokens/s per GPU).";
    var cli = "archledger plan " + page.model_id + " --input " + sc.input + " --output " + sc.output + " --ttft " + s.ttft + " --tpot " + (Number(s.tpot) / 1000) +
      s.gpu.map(function (g) { return " --gpu " + g; }).join("") + " --framework " + s.fw + " --kv-dtype " + s.kv + " --max-gpus " + scenarioMeta(sc).max_gpus;
    document.getElementById("sizing-cli").textContent = cli;
    chart([].concat.apply([], s.gpu.map(function (g) { return records(data.front, data.columns.front, s, sc, g); })));
  }
  function scenarioMeta(sc) { return data.scenarios.filter(function (x) { return x.input_len === sc.input && x.output_len === sc.output; })[0] || {}; }
  function chart(rows) {
    if (!window.vegaEmbed) return;
    var spec = JSON.parse(JSON.stringify(page.specs.front));
    spec.datasets = Object.assign({}, spec.datasets || {}, { front: rows });
    window.vegaEmbed("#chart-front", spec, { actions: false, renderer: "svg" })
      .catch(function (e) { console.error("chart front: " + e); });
  }
  restore();
  window.archJSON(root + "data/sizing/" + page.slug + ".json.gz")   // site.js: gzip-aware
    .then(function (d) { data = d; form.addEventListener("input", update); form.addEventListener("change", update); update(); })
    .catch(function (e) { document.getElementById("sizing-answer").textContent = "Could not load the sizing data (" + e.message + ")."; });
})();
