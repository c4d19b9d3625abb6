// Deployment explorer: the selection lives in the URL query; rows come from the build's JSON.
(function () {
  "use strict";
  var page = window.ARCH_PAGE, root = document.documentElement.getAttribute("data-root") || "";
  var base = root + "data/deploy/" + page.slug + "/", opsBase = root + "data/ops/" + page.slug + "/";
  var form = document.getElementById("pick"), fmt = window.archFmt, cache = {}, index = null;
  var params = new URLSearchParams(location.search);
  function get(url) { if (!cache[url]) cache[url] = fetch(url).then(function (r) { if (!r.ok) throw new Error(url + ": " + r.status); return r.json(); }); return cache[url]; }
  function records(table) { return table.rows.map(function (r) { var o = {}; table.columns.forEach(function (c, i) { o[c] = r[i]; }); return o; }); }
  function fill(select, values, current) {
    select.textContent = "";
    values.forEach(function (v) { var o = document.createElement("option"); o.value = String(v); o.textContent = String(v); select.appendChild(o); });
    if (current !== null && values.map(String).indexOf(String(current)) >= 0) select.value = String(current);
  }
  // the wanted batch when the list has it, else the nearest larger, else the largest (null: empty list)
  function pick(values, wanted) {
    if (!values.length) return null;
    if (wanted === null || wanted === undefined || wanted === "") return values[0];
    var w = Number(wanted), larger = values.filter(function (v) { return v >= w; });
    return larger.length ? larger[0] : values[values.length - 1];
  }
  function uniq(list) { var s = {}, out = []; list.forEach(function (v) { if (!s[v]) { s[v] = 1; out.push(v); } }); return out; }
  function cfgLabel(o) { return o.n_gpus + "x " + o.config; }
  function state() { var s = {}; ["gpu", "cfg", "fw", "kv", "input", "batch"].forEach(function (k) { s[k] = form.elements[k].value; }); return s; }
  function sync() { var s = state(), q = new URLSearchParams(s); history.replaceState(null, "", "?" + q.toString()); return s; }
  function row(label, value, text, doc, formula) {
    var dt = document.createElement("dt"); dt.textContent = label;
    var dd = document.createElement("dd"); dd.appendChild(window.archNum(value, text, formula || null, null, formula ? null : doc));
    return [dt, dd];
  }
  function link(o, s) {
    var q = new URLSearchParams({ gpu: o.gpu, cfg: cfgLabel(o), fw: o.framework, kv: o.kv_dtype, input: s.input, batch: s.batch });
    var a = document.createElement("a"); a.href = "?" + q.toString();
    a.textContent = o.gpu + " " + cfgLabel(o) + " (capacity " + o.caps[s.input] + ")"; return a;
  }
  // The batch is over this config's capacity (no row, or a row that does not fit): say so with the
  // engine's max_concurrent_requests, and list the evaluated configs whose capacity holds the batch.
  function overCapacity(s, combo, dec) {
    var box = document.getElementById("capacity"); box.textContent = "";
    if (dec && dec.fits) return;
    var cap = dec ? dec.max_concurrent_requests : combo.caps[s.input], p = document.createElement("p"); p.className = "warn";
    var at = fmt.tokens(s.input) + " prompt tokens + " + fmt.tokens(index.output_len) + " generated";
    p.textContent = cap === undefined ? "This config has no evaluated point at " + at + "."
      : "Batch " + s.batch + " exceeds this config's capacity of " + cap + " requests at " + at + " (max concurrent requests: weights, the prefill working set and every request's KV at its last token must fit).";
    box.appendChild(p);
    var want = Number(s.batch), holds = function (o) { return o.framework === s.fw && o.kv_dtype === s.kv && (o.caps[s.input] || 0) >= want; };
    var order = function (a, b) { return a.n_gpus - b.n_gpus || a.caps[s.input] - b.caps[s.input]; };
    var here = index.options.filter(function (o) { return o.gpu === s.gpu && holds(o); }).sort(order);
    var list = here.length ? here : index.options.filter(function (o) { return o.gpu !== s.gpu && holds(o); }).sort(order);
    var q = document.createElement("p"); q.id = "holders";
    if (!list.length) { q.textContent = "No evaluated config holds batch " + s.batch + " at this prompt length."; box.appendChild(q); return; }
    q.textContent = "Configs " + (here.length ? "on " + s.gpu : "on other GPUs") + " that hold batch " + s.batch + ": ";
    var ul = document.createElement("ul"); ul.className = "holders";
    list.slice(0, 12).forEach(function (o) { var li = document.createElement("li"); li.appendChild(link(o, s)); ul.appendChild(li); });
    box.appendChild(q); box.appendChild(ul);
  }
  function render(rows, s, combo) {
    var chosen = rows.filter(function (r) { return String(r.input_len) === s.input && String(r.batch) === s.batch; });
    var dec = chosen[0];
    var sum = document.getElementById("summary"); sum.textContent = "";
    overCapacity(s, combo, dec);
    var membar = document.getElementById("membar"); membar.style.display = dec ? "" : "none";   // no point: no memory bar
    if (!dec) { membar.textContent = ""; return; }
    var docs = page.docs, dl = document.createElement("dl"); dl.className = "cards";
    var items = [["Fits", dec.fits ? 1 : 0, dec.fits ? "yes" : "no — short by " + fmt.bytes(dec.shortfall_bytes) + " per GPU", docs.fits],
      ["TTFT", dec.ttft_s, fmt.time(dec.ttft_s), docs.ttft_s], ["TPOT", dec.tpot_s, fmt.time(dec.tpot_s), docs.tpot_s],
      ["Decode tokens/s per GPU", dec.tokens_per_s_per_gpu, dec.tokens_per_s_per_gpu.toPrecision(4), docs.tokens_per_s_per_gpu],
      ["Max concurrent requests", dec.max_concurrent_requests, String(dec.max_concurrent_requests), docs.max_concurrent_requests],
      ["Weights per GPU", dec.weight_bytes_per_gpu, fmt.bytes(dec.weight_bytes_per_gpu), docs.weight_bytes_per_gpu, index.weight_formulas[combo.weight_formula]],
      ["KV per request", dec.kv_bytes_per_request, fmt.bytes(dec.kv_bytes_per_request), docs.kv_bytes_per_request]];
    if (dec.kv_state_bytes_per_request > 0)   // a hybrid: how much of it is the flat recurrent state
      items.push(["of which flat state", dec.kv_state_bytes_per_request, fmt.bytes(dec.kv_state_bytes_per_request), docs.kv_state_bytes_per_request]);
    items = items.concat([
      ["Decode bound", 0, dec.bound, docs.bound], ["Prefill bound", 0, dec.prefill_bound || "—", docs.bound]]);
    items.forEach(function (it) { var d = document.createElement("div"); row(it[0], it[1], it[2], it[3], it[4]).forEach(function (e) { d.appendChild(e); }); dl.appendChild(d); });
    sum.appendChild(dl);
    if (dec.extrapolated) { var w = document.createElement("p"); w.className = "warn"; w.textContent = "! Context past the model's maximum (" + page.max_context + " tokens): extrapolation."; sum.appendChild(w); }
    var bar = document.getElementById("membar"), usable = dec.usable_bytes_per_gpu; bar.textContent = "";
    [["weights", dec.weight_bytes_per_gpu], ["prefill", dec.activation_bytes_per_gpu], ["KV", dec.kv_bytes_per_gpu], ["free", dec.free_bytes_per_gpu]].forEach(function (p) {
      var seg = document.createElement("div"); seg.className = "seg seg-" + p[0];
      seg.style.width = Math.min(100, 100 * p[1] / usable) + "%"; seg.textContent = p[0] + " " + fmt.bytes(p[1]); bar.appendChild(seg);
    });
    bar.setAttribute("aria-label", "memory per GPU: weights " + fmt.bytes(dec.weight_bytes_per_gpu) + ", prefill working set " + fmt.bytes(dec.activation_bytes_per_gpu) + ", KV " + fmt.bytes(dec.kv_bytes_per_gpu) + " of " + fmt.gib(usable) + " usable (the runtime's GiB)");
  }
  var strings = null;
  function renderOps(ops, s, combo) {
    var tbody = document.querySelector("#ops tbody"); tbody.textContent = "";
    var mine = ops.filter(function (r) { return r.framework === s.fw && r.kv_dtype === s.kv; });  // the file is this GPU, count and config's decode rows
    var F = (strings && strings.formulas) || [], U = (strings && strings.uids) || [];
    mine.forEach(function (r) { r.op_uid = U[r.uid]; });
    var points = uniq(mine.map(function (r) { return r.batch + "/" + r.input_len; }));
    var want = s.batch + "/" + s.input, at = points.indexOf(want) >= 0 ? want : points[0];
    document.dispatchEvent(new CustomEvent("arch:ops", { detail: { rows: mine.filter(function (r) { return at && r.batch + "/" + r.input_len === at; }), gpu: s.gpu } }));   // static/js/roofline.js
    var note = document.getElementById("ops-note");
    if (!at) { note.textContent = "No per-op table was built for this selection."; return; }
    note.textContent = "Decode, batch " + at.split("/")[0] + ", prompt " + at.split("/")[1] + " tokens" + (at === want ? "." : " (the per-op tables are built for the grid's page points; this is the nearest).");
    mine.filter(function (r) { return r.batch + "/" + r.input_len === at; }).forEach(function (r) {
      var tr = document.createElement("tr");
      var cells = [[r.op_uid, null], [r.kind, null], [fmt.si(r.flops), F[r.f_flops]], [fmt.bytes(r.bytes), F[r.f_bytes]], [fmt.bytes(r.comm_bytes), r.comm_bytes ? F[r.f_comm] : null],
        [fmt.time(r.t_compute_s), null], [fmt.time(r.t_memory_s), null], [fmt.time(r.t_comm_s), null], [fmt.time(r.t_sol_s), null], [r.bound, null]];
      var defs = [null, null, null, null, null, "FLOPs / peak of the operand dtype on this GPU", "bytes / HBM bandwidth",
                  "link bytes / link bandwidth (scale-up or scale-out)", "max(compute, memory, comm)", null];
      cells.forEach(function (c, i) { var td = document.createElement("td"); if (i >= 2 && i <= 8) td.className = "n";
        if (c[1]) td.appendChild(window.archNum(0, c[0], c[1], r.op_uid));
        else if (defs[i]) td.appendChild(window.archNum(0, c[0], null, r.op_uid, defs[i]));
        else if (i === 0) { var code = document.createElement("code"); code.textContent = c[0]; td.appendChild(code); } else td.textContent = c[0];
        tr.appendChild(td); });
      if (r.kind === "comm") tr.className = "comm"; if (r.kind === "fused") tr.className = "fused";
      tbody.appendChild(tr);
    });
  }
  function chart(id, spec, datasets) {
    if (!window.vegaEmbed) return;
    // the build's spec names its datasets; this selection's rows fill them (top-level "datasets")
    var filled = JSON.parse(JSON.stringify(spec));
    filled.datasets = Object.assign({}, filled.datasets || {}, datasets);
    window.vegaEmbed("#" + id, filled, { actions: false, renderer: "svg" })
      .catch(function (e) { console.error("chart " + id + ": " + e); });
  }
  function update() {
    var s = sync(), combo = index.options.filter(function (o) { return o.gpu === s.gpu && cfgLabel(o) === s.cfg && o.framework === s.fw && o.kv_dtype === s.kv; })[0];
    if (!combo) return;
    // one file per GPU, GPU count and parallel config (its frameworks and KV dtypes together)
    var file = s.gpu + "/" + combo.n_gpus + "-" + combo.config + ".json";
    Promise.all([get(base + file), combo.ops ? get(opsBase + file) : { columns: [], rows: [] },
                 get(opsBase + "strings.json").catch(function () { return {}; })]).then(function (res) {
      strings = res[2];
      document.getElementById("dl-csv").href = root + "downloads/deployments/" + page.slug + "/" + s.gpu + ".csv";
      document.getElementById("dl-json").href = base + file;
      var rows = records(res[0]).filter(function (r) { return r.framework === s.fw && r.kv_dtype === s.kv; });
      var inputs = uniq(rows.map(function (r) { return r.input_len; })).sort(function (a, b) { return a - b; });
      fill(form.elements.input, inputs, s.input || params.get("input") || "4096");
      if (!form.elements.input.value) form.elements.input.value = String(inputs[0]);
      // the batches this GPU's data has at this prompt length (every config's, so a batch over the
      // selected config's capacity stays selectable and is explained, not dropped)
      var batches = (index.batches[s.gpu + "/" + s.fw + "/" + s.kv + "/" + form.elements.input.value] || []).slice();
      var wanted = s.batch || params.get("batch"), chosen = pick(batches, wanted);
      fill(form.elements.batch, batches, chosen);
      var note = document.getElementById("batch-note");
      note.textContent = wanted && chosen !== null && String(chosen) !== String(wanted)
        ? "Batch " + wanted + " was not evaluated on " + s.gpu + " at " + fmt.tokens(form.elements.input.value) + " prompt tokens; showing batch " + chosen
          + (Number(chosen) > Number(wanted) ? ", the nearest larger." : ", the largest evaluated.") : "";
      s = sync();
      render(rows, s, combo);
      renderOps(records(res[1]), s, combo);
      chart("chart-batch", page.specs.batch, { rows: rows });
      var best = index.best_per_gpu.filter(function (b) { return b.framework === s.fw && b.kv_dtype === s.kv; }).map(function (b) { var o = Object.assign({}, b); o.label = b.gpu + " " + b.n_gpus + "x " + b.config; return o; });
      chart("chart-gpus", page.specs.gpus, { best: best });
      chart("chart-ep", page.specs.ep, { configs: index.best.filter(function (b) { return b.gpu === s.gpu && b.n_gpus === combo.n_gpus && b.framework === s.fw && b.kv_dtype === s.kv; }) });
    }).catch(function (e) { console.error(e); document.getElementById("summary").textContent = "Could not load the data: " + e.message; });
  }
  get(base + "index.json").then(function (idx) {
    index = idx;
    var opts = idx.options;
    fill(form.elements.gpu, uniq(opts.map(function (o) { return o.gpu; })), params.get("gpu") || "H200");
    function refill() {
      var g = form.elements.gpu.value, mine = opts.filter(function (o) { return o.gpu === g; });
      fill(form.elements.cfg, uniq(mine.map(cfgLabel)), params.get("cfg"));
      fill(form.elements.fw, uniq(mine.map(function (o) { return o.framework; })), params.get("fw") || "vllm");
      fill(form.elements.kv, uniq(mine.map(function (o) { return o.kv_dtype; })), params.get("kv") || "bf16");
    }
    refill();
    // a new GPU keeps the batch, prompt length, framework, KV dtype and (where it exists) the config
    form.elements.gpu.addEventListener("change", function () { params = new URLSearchParams(state()); refill(); update(); });
    ["cfg", "fw", "kv", "input", "batch"].forEach(function (k) { form.elements[k].addEventListener("change", function () { params = new URLSearchParams(location.search); update(); }); });
    update();
    chart("chart-kv", page.specs.kv, { kv: page.kv_rows, limit: [{ max_context: page.max_context }] });
  }).catch(function (e) { console.error(e); document.getElementById("summary").textContent = "Could not load the data: " + e.message; });
})();
