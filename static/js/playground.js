// The playground: a what-if variant's old -> new numbers, recomputed as the reader changes its dims.
// The numbers are the engine's own formulas (engine/build/whatif.formulas, exported as formula trees)
// evaluated by static/js/formula.js at the build's values with the reader's dims put in: no second
// estimator. A derived binding (lin_conv_dim = 2 * lin_k_heads * lin_dk + ...) is its own exported
// tree, evaluated first. tests/test_site_playground.py checks the page against the Python walk.
(function () {
  "use strict";
  var data = window.ARCH_PAGE || {}, F = window.archFormula, fmt = window.archFmt;
  var variants = data.variants || [];
  var byName = {};
  variants.forEach(function (v) { byName[v.variant] = v; });
  var $ = function (id) { return document.getElementById(id); };
  var select = $("pg-variant"), context = $("pg-context"), binds = $("pg-binds"), tbody = document.querySelector("#pg-table tbody");
  var UNITS = { params: "", params_active: "", weight_bytes: "B", kv_bytes_per_token: "B", kv_bytes_per_request: "B",
                prefill_flops: "", decode_flops: "" };

  function show(key, value) { return UNITS[key] === "B" ? fmt.bytes(value) : fmt.si(value); }

  // the new side's environment: the build's values, the reader's dims, derived dims from their trees
  function envs(v) {
    var ctx = Number(context.value) || 1, old = Object.assign({}, v.env.old), neu = Object.assign({}, v.env.new);
    ["seq", "ctx", "length"].forEach(function (k) { old[k] = ctx; neu[k] = ctx; });
    v.bind_list.forEach(function (b) {
      if (b.tree === null) { var el = $("pg-dim-" + b.dim); neu[b.dim] = Number(el.value); }
    });
    v.bind_list.forEach(function (b) {
      if (b.tree !== null) { neu[b.dim] = F.evaluate(b.tree, neu); $("pg-dim-" + b.dim).value = neu[b.dim]; }
    });
    return { old: old, new: neu };
  }

  function recompute() {
    var v = byName[select.value];
    if (!v) return;
    var e = envs(v);
    tbody.textContent = "";
    Object.keys(v.recomputed).forEach(function (key) {
      var o = F.evaluate(v.formulas.old[key], e.old), n = F.evaluate(v.formulas.new[key], e.new);
      var tr = document.createElement("tr"), th = document.createElement("th");
      th.scope = "row"; th.textContent = v.recomputed[key][0]; tr.appendChild(th);
      [["old", o], ["new", n]].forEach(function (pair) {
        var td = document.createElement("td");
        td.className = "n"; td.setAttribute("data-k", key); td.setAttribute("data-side", pair[0]);
        td.setAttribute("data-v", String(pair[1]));
        td.appendChild(window.archNum(pair[1], show(key, pair[1]), null, null,
                                      "the engine's formula for " + v.recomputed[key][0] + " at the dims above"));
        tr.appendChild(td);
      });
      var d = document.createElement("td");
      d.textContent = o ? ((n - o) / o * 100).toFixed(1) + "%" : "";
      if (o && n > o) d.textContent = "+" + d.textContent;
      tr.appendChild(d);
      tbody.appendChild(tr);
    });
  }

  function form(v) {
    binds.textContent = "";
    $("pg-swap").textContent = "Base " + v.base_name + " (" + v.variant_of + "); swaps: " + v.swaps.join("; ");
    v.bind_list.forEach(function (b) {
      var label = document.createElement("label"), input = document.createElement("input");
      label.textContent = b.dim + " ";
      input.type = "number"; input.min = "1"; input.step = "1"; input.id = "pg-dim-" + b.dim; input.value = b.value;
      input.title = b.doc;
      if (b.tree !== null) { input.readOnly = true; input.title = b.doc + " = " + b.expression; }
      label.appendChild(input);
      var src = document.createElement("small");
      src.textContent = b.tree !== null ? "= " + b.expression : "source: " + b.src;
      label.appendChild(src);
      if (b.tree === null && b.used_by.length) {
        var also = document.createElement("small");
        also.textContent = "in the corpus: ";
        b.used_by.forEach(function (u, i) {
          var btn = document.createElement("button");
          btn.type = "button"; btn.textContent = u.value + " (" + (data.names[u.model] || u.model) + ")";
          btn.addEventListener("click", function () { input.value = u.value; recompute(); });
          if (i) also.appendChild(document.createTextNode(" "));
          also.appendChild(btn);
        });
        label.appendChild(also);
      }
      input.addEventListener("input", recompute);
      binds.appendChild(label);
    });
    recompute();
  }

  if (select) {
    var wanted = new URLSearchParams(location.search).get("v");
    if (wanted && byName[wanted]) select.value = wanted;
    select.addEventListener("change", function () { form(byName[select.value]); });
    context.addEventListener("input", recompute);
    if (byName[select.value]) form(byName[select.value]);
  }

  // -- pick a base model and a slot: the components fitting its contract, and how to try one
  var cat = data.catalog || {}, pm = $("pick-model"), ps = $("pick-slot"), pc = $("pick-component"), out = $("pick-out");
  function option(sel, value, text) { var o = document.createElement("option"); o.value = value; o.textContent = text; sel.appendChild(o); }
  function pickSlots() {
    ps.textContent = "";
    Object.keys((cat[pm.value] || {}).slots || {}).forEach(function (s) { option(ps, s, s); });
    pickComponents();
  }
  function pickComponents() {
    pc.textContent = "";
    var slot = ((cat[pm.value] || {}).slots || {})[ps.value];
    if (!slot) return;
    Object.keys(slot.fits).forEach(function (c) { option(pc, c, c + (slot.current.indexOf(c) >= 0 ? " (now)" : "")); });
    pickOut();
  }
  function pickOut() {
    out.textContent = "";
    var slot = ((cat[pm.value] || {}).slots || {})[ps.value], comp = pc.value;
    if (!slot || !comp) return;
    var p = document.createElement("p");
    p.textContent = "Now: " + slot.current.join(", ") + " in layer templates " + slot.templates.join(", ") + ".";
    out.appendChild(p);
    var shipped = variants.filter(function (v) {
      return v.variant_of === pm.value && v.swaps.some(function (s) { return s.indexOf("." + ps.value + "=" + comp) >= 0; });
    });
    if (shipped.length) {
      var q = document.createElement("p"), a = document.createElement("a");
      a.href = "?v=" + encodeURIComponent(shipped[0].variant) + "#edit-h"; a.textContent = shipped[0].display_name;
      q.appendChild(document.createTextNode("A corpus variant does this: ")); q.appendChild(a);
      out.appendChild(q);
    }
    var needs = slot.fits[comp] || [], used = (data.used || {})[comp] || {};
    var cmd = "archledger edit " + pm.value + " --swap 'layers[" + slot.templates.join(",") + "]." + ps.value + "=" + comp + "'";
    var notes = document.createElement("ul");
    needs.forEach(function (d) {
      var first = (used[d] || [])[0];
      cmd += " --bind " + d + "=" + (first ? first.value : "N");
      var li = document.createElement("li");
      li.textContent = d + ": " + ((data.dims || {})[d] || "") + (first ? " — value from " + (data.names[first.model] || first.model) : " — no corpus model binds it: choose one");
      notes.appendChild(li);
    });
    var pre = document.createElement("pre"), code = document.createElement("code");
    code.textContent = cmd + " --save corpus/variants/NAME.yaml"; pre.appendChild(code);
    var r = document.createElement("p");
    r.textContent = needs.length ? "It needs these dims the base does not bind (pre-filled from the corpus models using " + comp + "):" : "It needs no new dims.";
    out.appendChild(r); out.appendChild(notes); out.appendChild(pre);
  }
  if (pm) {
    Object.keys(cat).forEach(function (m) { option(pm, m, cat[m].name); });
    pm.addEventListener("change", pickSlots); ps.addEventListener("change", pickComponents); pc.addEventListener("change", pickOut);
    pickSlots();
  }
})();
