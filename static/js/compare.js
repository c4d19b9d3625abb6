// Compare: two models side by side, block by block; the pair lives in the URL (?a=&b=).
(function () {
  "use strict";
  var root = document.documentElement.getAttribute("data-root") || "";
  var form = document.getElementById("pair"), out = document.getElementById("compare"), fmt = window.archFmt;
  var params = new URLSearchParams(location.search), unknown = [];
  // A link may name a model by its slug (org--name, the options' values), its id (org/name), its
  // name part alone or its display name, in any case: each resolves to its option. Anything else is
  // said on the page and the default pick is kept (a select given a value it lacks would be empty,
  // and the page would fetch a file that does not exist).
  function resolve(text) {
    var want = text.trim().toLowerCase(), options = Array.prototype.slice.call(form.elements.a.options);
    var forms = [function (o) { return o.value.toLowerCase(); }, function (o) { return o.value.toLowerCase().replace("--", "/"); },
                 function (o) { return o.value.toLowerCase().split("--").pop(); }, function (o) { return o.textContent.trim().toLowerCase(); }];
    for (var i = 0; i < forms.length; i++) {
      var hit = options.filter(function (o) { return forms[i](o) === want; });
      if (hit.length === 1) return hit[0].value;
    }
    return null;
  }
  var picked = {};
  ["a", "b"].forEach(function (k) {
    if (!params.get(k)) return;
    var slug = resolve(params.get(k));
    if (slug !== null) { form.elements[k].value = slug; picked[k] = true; } else unknown.push(params.get(k));
  });
  if (!picked.b) {
    if (form.elements.b.options.length > 1) form.elements.b.selectedIndex = 1;
  }
  function load(slug) { return window.archJSON(root + "data/models/" + slug + ".json.gz"); }
  function dims(m) { var d = {}; (m.dims || []).forEach(function (x) { d[x.name] = x.value; }); return d; }
  function cell(q, text, node, m) { var td = document.createElement("td"); td.className = "n"; if (q) td.appendChild(window.archNum(q.value, text, q.formula, node, null, m && dims(m))); else td.textContent = "—"; return td; }
  // a table in its own horizontal scroller: on a phone a wide table scrolls, not the page
  function wrapped(t) { var w = document.createElement("div"); w.className = "table-wrap"; w.appendChild(t); return w; }
  function render(a, b) {
    out.textContent = "";
    var h = document.createElement("h2"); h.textContent = a.name + " vs " + b.name; out.appendChild(h);
    var t = document.createElement("table"); t.className = "data";
    var head = t.createTHead().insertRow(); ["measure", a.name, b.name].forEach(function (x) {   // the row headers' column is named (axe: empty-table-header)
      var th = document.createElement("th"); th.scope = "col"; th.textContent = x; head.appendChild(th); });
    var body = t.createTBody();
    [["Parameters", "params_total", fmt.si], ["Active per token (with embedding)", "params_active", fmt.si], ["Layers", "n_layers", String], ["Max context", "max_context", fmt.tokens],
     ["KV per token (BF16)", "kv_bytes_per_token_growing", fmt.bytes],
     // the per-request KV that does not grow with context (recurrent states, window-capped caches at
     // their full window): the gallery shows it, so a hybrid is not compared on its growing part alone
     ["KV fixed per request (BF16)", "kv_fixed_bytes", fmt.bytes], ["Checkpoint bytes", "checkpoint_bytes", fmt.bytes]].forEach(function (r) {
      var tr = body.insertRow(); var th = document.createElement("th"); th.scope = "row"; th.textContent = r[0]; tr.appendChild(th);
      [a, b].forEach(function (m) { var q = m.overview[r[1]]; tr.appendChild(cell(q, r[2](q.value), "", m)); });
    });
    out.appendChild(wrapped(t));
    var h2 = document.createElement("h2"); h2.textContent = "Block by block"; out.appendChild(h2);
    var grid = document.createElement("div"); grid.className = "cols";
    [a, b].forEach(function (m) {
      var col = document.createElement("section"); var h3 = document.createElement("h3"); h3.textContent = m.name; col.appendChild(h3);
      var tb = document.createElement("table"); tb.className = "data"; var hr = tb.createTHead().insertRow();
      ["block / component", "kind", "params per layer", "layers", "KV / token / layer"].forEach(function (x) { var th = document.createElement("th"); th.scope = "col"; th.textContent = x; hr.appendChild(th); });
      var bd = tb.createTBody();
      m.components.filter(function (c) { return c.stack === "main" && c.uid.split("/").length >= 2 && c.uid.split("/").length <= 3; }).forEach(function (c) {
        var tr = bd.insertRow(); var td = document.createElement("td"); var code = document.createElement("code"); code.textContent = c.uid; td.appendChild(code); tr.appendChild(td);
        var k = document.createElement("td"); k.textContent = c.component + (c.role === "attention" ? " (attention)" : ""); tr.appendChild(k);
        tr.appendChild(cell(c.params_per_layer, fmt.si(c.params_per_layer.value), c.uid, m)); tr.appendChild(cell(c.repeat, String(c.repeat.value), c.uid, m));
        tr.appendChild(cell(c.kv_bytes_per_token_per_layer, fmt.bytes(c.kv_bytes_per_token_per_layer.value), c.uid, m));
      });
      col.appendChild(wrapped(tb)); grid.appendChild(col);
    });
    out.appendChild(grid);
  }
  // -- side by side on one deployment: a GPU, GPU count, parallel config, framework and KV dtype the
  // build evaluated for both models, at any prompt, output and batch: each model's numbers come from
  // its structures' formula trees by the engine's rules (static/js/deploy_eval.js), as on its deploy page
  var side = document.getElementById("side"), pick = document.getElementById("side-pick"), table = document.getElementById("side-table");
  var docs = (window.ARCH_PAGE || {}).docs || {}, evals = {};
  function keyOf(o) { return [o.gpu, o.n_gpus + "x " + o.config, o.framework, o.kv_dtype].join(" \u00b7 "); }
  function evalOf(slug) { if (!evals[slug]) evals[slug] = window.archDeployEval(root, slug); return evals[slug]; }
  function fill(select, values, current) {
    select.textContent = "";
    values.forEach(function (v) { var o = document.createElement("option"); o.value = String(v); o.textContent = String(v); select.appendChild(o); });
    if (current !== null && current !== undefined && values.map(String).indexOf(String(current)) >= 0) select.value = String(current);
  }
  function whole(text, low) { var n = Number(text); return text !== "" && Number.isInteger(n) && n >= low ? n : null; }
  // the steady state of continuous batching first (the basis every front and answer uses:
  // engine/serving/steady.FRONT_BASIS), each worst-case figure right after its steady one
  var yesNo = function (v) { return v ? "yes" : "no"; }, si = function (v) { return fmt.si(v); };
  var ROWS = [["Fits (steady state)", "fits_steady", yesNo], ["Fits with every request at its last token (worst case)", "fits", yesNo],
    ["Max concurrent requests (steady state)", "max_concurrent_requests_steady", String], ["Max concurrent requests (worst case)", "max_concurrent_requests", String],
    ["TPOT (steady state: mean over the output)", "tpot_mean_s", fmt.time], ["TPOT at the last token (worst case)", "tpot_s", fmt.time],
    ["Decode tokens/s per GPU (at the last token)", "tokens_per_s_per_gpu", si],
    ["TTFT", "ttft_s", fmt.time],
    ["Weights per GPU", "weight_bytes_per_gpu", fmt.bytes], ["KV cache per GPU (this batch)", "kv_bytes_per_gpu", fmt.bytes],
    ["Prefill working set per GPU", "activation_bytes_per_gpu", fmt.bytes], ["Free per GPU", "free_bytes_per_gpu", fmt.bytes],
    ["Usable per GPU", "usable_bytes_per_gpu", fmt.bytes]];
  function sideTable(a, b, ra, rb, o, p) {
    table.textContent = "";
    var t = document.createElement("table"); t.className = "data side";
    var head = t.createTHead().insertRow(), th0 = document.createElement("th"); th0.scope = "col"; th0.textContent = keyOf(o); head.appendChild(th0);
    [a, b].forEach(function (m) {
      var th = document.createElement("th"); th.scope = "col"; var link = document.createElement("a");
      link.href = root + "models/" + m.slug + "/deploy/?" + new URLSearchParams({ gpu: o.gpu, cfg: o.n_gpus + "x " + o.config, fw: o.framework, kv: o.kv_dtype, input: p.input, output: p.output, batch: p.batch }).toString();
      link.textContent = m.name; th.appendChild(link); head.appendChild(th);
    });
    var body = t.createTBody();
    ROWS.forEach(function (r) {
      var tr = body.insertRow(); tr.setAttribute("data-k", r[1]);
      var th = document.createElement("th"); th.scope = "row"; th.textContent = r[0]; tr.appendChild(th);
      [ra, rb].forEach(function (row) {
        var td = document.createElement("td"); td.className = "n";
        td.appendChild(window.archNum(row[r[1]], r[2](row[r[1]]), null, null, docs[r[1]] || null));
        tr.appendChild(td);
      });
    });
    table.appendChild(wrapped(t));
    var n = document.createElement("p"); n.className = "note";
    n.textContent = fmt.tokens(p.input) + " prompt tokens, " + fmt.tokens(p.output) + " generated, batch " + p.batch + "; one model replica on " + o.n_gpus + " " + o.gpu + ", each model's own formulas by the engine's rules (archledger deploy prints the same).";
    table.appendChild(n);
  }
  function sideUpdate(ma, mb) {
    var ea = evalOf(ma.slug), eb = evalOf(mb.slug);
    Promise.all([ea.index(), eb.index()]).then(function (ix) {
      var inB = {}; ix[1].options.forEach(function (o) { if (o.file) inB[keyOf(o)] = o; });
      var shared = ix[0].options.filter(function (o) { return o.file && inB[keyOf(o)]; })
        .sort(function (p, q) { return p.n_gpus - q.n_gpus || (p.gpu < q.gpu ? -1 : p.gpu > q.gpu ? 1 : 0); });
      side.hidden = false;
      if (!shared.length) { pick.hidden = true; table.textContent = "No GPU and parallel config was evaluated for both models."; return; }
      pick.hidden = false;
      var keys = shared.map(keyOf), wanted = params.get("gpu") ? [params.get("gpu"), params.get("cfg"), params.get("fw"), params.get("kv")].join(" \u00b7 ") : null;
      fill(pick.elements.dep, keys, pick.elements.dep.value && keys.indexOf(pick.elements.dep.value) >= 0 ? pick.elements.dep.value : wanted);
      var oa = shared[keys.indexOf(pick.elements.dep.value)], ob = inB[keyOf(oa)];
      var el = pick.elements;
      if (!el.input.value) el.input.value = params.get("input") || String((window.ARCH_PAGE || {}).compare_input || 4096);
      if (!el.output.value) el.output.value = params.get("output") || String(ix[0].output_len || 1024);
      if (!el.batch.value) el.batch.value = params.get("batch") || "1";
      var p = { input: whole(el.input.value, 1), output: whole(el.output.value, 0), batch: whole(el.batch.value, 1) };
      if (p.input === null || p.output === null || p.batch === null) { table.textContent = "Enter whole numbers: prompt tokens >= 1, output tokens >= 0, batch >= 1."; return; }
      return Promise.all([ea.at(oa, p), eb.at(ob, p)]).then(function (r) {
        sideTable(ma, mb, r[0], r[1], oa, p);
        var q = new URLSearchParams(location.search);
        [["gpu", oa.gpu], ["cfg", oa.n_gpus + "x " + oa.config], ["fw", oa.framework], ["kv", oa.kv_dtype], ["input", p.input], ["output", p.output], ["batch", p.batch]].forEach(function (kv) { q.set(kv[0], kv[1]); });
        history.replaceState(null, "", "?" + q.toString());
      });
    }).catch(function (e) { side.hidden = false; table.textContent = "Could not load the deployments: " + e.message; });
  }
  var models = null;
  function update() {
    var a = form.elements.a.value, b = form.elements.b.value, q = new URLSearchParams(location.search);
    q.set("a", a); q.set("b", b);
    history.replaceState(null, "", "?" + q.toString());
    if (!a || !b) { out.textContent = "This build has fewer than two models to compare."; return; }
    Promise.all([load(a), load(b)]).then(function (m) {
      render(m[0], m[1]);
      if (unknown.length) {      // said once, above the pair shown instead
        var note = document.createElement("p"); note.className = "note"; note.id = "compare-unknown";
        note.textContent = "No model " + unknown.map(function (u) { return "\u201c" + u + "\u201d"; }).join(" or ")
          + " in this build (a link names one by its id, org/name, or by its name): showing the pair picked above instead.";
        out.insertBefore(note, out.firstChild); unknown = [];
      }
      models = [{ slug: a, name: m[0].name }, { slug: b, name: m[1].name }];
      if (side) sideUpdate(models[0], models[1]);
    }).catch(function (e) { out.textContent = "Could not load the models' data (" + e.message + ")."; });
  }
  form.addEventListener("change", update);
  if (pick) pick.addEventListener("change", function () { if (models) sideUpdate(models[0], models[1]); });
  update();
})();
