// The playground: a what-if variant's old -> new numbers, recomputed as the reader changes its dims.
// The numbers are the engine's own formulas (engine/playground/catalog.formulas, exported as formula trees)
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

  // the context and each free dim must be a positive whole number, as the live picks below and the
  // deploy page check theirs: an empty or zero field is said, never recomputed as 0
  function whole(text) { var t = String(text).trim(), n = Number(t); return t !== "" && Number.isInteger(n) && n >= 1; }
  function invalid(v) {
    var fields = [["context", context]];
    v.bind_list.forEach(function (b) { if (b.tree === null) fields.push([b.dim, $("pg-dim-" + b.dim)]); });
    var bad = [];
    fields.forEach(function (f) {
      var ok = whole(f[1].value);
      if (ok) f[1].removeAttribute("aria-invalid"); else { f[1].setAttribute("aria-invalid", "true"); bad.push(f[0]); }
    });
    return bad;
  }

  function recompute() {
    var v = byName[select.value];
    if (!v) return;
    var status = $("pg-status"), bad = invalid(v);
    tbody.textContent = "";
    if (status) {
      status.textContent = bad.length ? "Enter a positive whole number for " + bad.join(", ") + " to see the numbers." : "";
      if (bad.length) status.setAttribute("data-invalid", bad.join(",")); else status.removeAttribute("data-invalid");
    }
    if (bad.length) return;
    var e = envs(v);
    Object.keys(v.recomputed).forEach(function (key) {
      var o = F.evaluate(v.formulas.old[key], e.old), n = F.evaluate(v.formulas.new[key], e.new);
      var tr = document.createElement("tr"), th = document.createElement("th");
      th.scope = "row"; th.textContent = v.recomputed[key][0]; tr.appendChild(th);
      oldNew(tr, key, o, n, function (x) { return show(key, x); },
             "the engine's formula for " + v.recomputed[key][0] + " at the dims above");
      tbody.appendChild(tr);
    });
  }
  // a row's old and new cells (data-k, data-side, data-v: what the browser tests read) and the change
  function oldNew(tr, key, o, n, shown, tip) {
    [["old", o], ["new", n]].forEach(function (pair) {
      var td = document.createElement("td");
      td.className = "n"; td.setAttribute("data-k", key); td.setAttribute("data-side", pair[0]);
      td.setAttribute("data-v", String(pair[1]));
      td.appendChild(window.archNum(pair[1], shown(pair[1]), null, null, tip));
      tr.appendChild(td);
    });
    var d = document.createElement("td");
    d.textContent = o ? ((n - o) / o * 100).toFixed(1) + "%" : "";
    if (o && n > o) d.textContent = "+" + d.textContent;
    tr.appendChild(d);
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

  // -- pick a base model and a slot: the components fitting its contract, live. The build exports
  // per base model its numbers' formula trees and, per pick, each number's change new - old as
  // trees over the base's dims, the component's new dims and the scenario (engine/playground/whatif.pick):
  // new = old + change, all evaluated here by formula.js at the reader's dims.
  var cat = data.catalog || {}, pm = $("pick-model"), ps = $("pick-slot"), pc = $("pick-component"), out = $("pick-out");
  var sec = $("pick-sec"), root = sec ? sec.getAttribute("data-root") : "", live = data.live || {}, loaded = {};
  var pbinds = $("pick-binds"), pstatus = $("pick-status"), pctx = $("pick-context"), pgraph = $("pick-graph");
  var ptbody = document.querySelector("#pick-table tbody"), current = null;
  function option(sel, value, text) { var o = document.createElement("option"); o.value = value; o.textContent = text; sel.appendChild(o); }
  function name(m) { return (data.names || {})[m] || m; }
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
  function para(parent, text) { var p = document.createElement("p"); p.textContent = text; parent.appendChild(p); return p; }
  function clearPick() { pbinds.textContent = ""; ptbody.textContent = ""; pstatus.textContent = ""; pgraph.textContent = ""; current = null; }
  function pickOut() {
    out.textContent = ""; clearPick();
    var model = pm.value, slot = ((cat[model] || {}).slots || {})[ps.value], comp = pc.value;
    if (!slot || !comp) return;
    para(out, "Now: " + slot.current.join(", ") + " in layer templates " + slot.templates.join(", ") + ".");
    var shipped = variants.filter(function (v) {
      return v.variant_of === model && v.swaps.some(function (s) { return s.indexOf("." + ps.value + "=" + comp) >= 0; });
    });
    if (shipped.length) {
      var q = para(out, "A corpus variant does this: "), a = document.createElement("a");
      a.href = "?v=" + encodeURIComponent(shipped[0].variant) + "#edit-h"; a.textContent = shipped[0].display_name;
      q.appendChild(a);
    }
    if (!live[model]) { pstatus.textContent = "This build has no live data for " + name(model) + "."; return; }
    if (!loaded[model]) loaded[model] = window.archJSON(root + live[model]);
    var asked = model + "|" + ps.value + "|" + comp;
    loaded[model].then(function (doc) {
      if (asked !== pm.value + "|" + ps.value + "|" + pc.value) return;    // the reader moved on
      var p = (doc.picks[ps.value] || {})[comp];
      if (!p) { pstatus.textContent = name(model) + " already has " + comp + " in every layer reaching " + ps.value + ": nothing changes."; return; }
      if (p.error) { pstatus.textContent = "This swap does not resolve: " + p.error; return; }
      current = { model: model, comp: comp, doc: doc, pick: p, slot: slot, slotName: ps.value };
      pickForm(current);
      pickGraph(slot, comp);
      pickRecompute();
    }).catch(function (e) { pstatus.textContent = "Could not load the live data (" + e.message + ")."; });
  }
  function pickForm(cur) {
    var used = (data.used || {})[cur.comp] || {};
    var tpl = document.createElement("fieldset"), legend = document.createElement("legend");
    tpl.id = "pick-templates";
    legend.textContent = "Swap in layer templates" + (cur.pick.tickable ? "" : " (a layer stream touches this slot: all of them)");
    tpl.appendChild(legend);
    cur.pick.templates.forEach(function (t) {
      var label = document.createElement("label"), box = document.createElement("input");
      box.type = "checkbox"; box.checked = true; box.id = "pick-tpl-" + t; box.value = t;
      box.disabled = !cur.pick.tickable;
      box.addEventListener("change", pickRecompute);
      label.appendChild(box); label.appendChild(document.createTextNode(" " + t + " "));
      tpl.appendChild(label);
    });
    pbinds.appendChild(tpl);
    para(pbinds, cur.pick.needs.length ? "Dims " + cur.comp + " needs that " + name(cur.model) + " does not bind:"
                                       : cur.comp + " needs no dim the base does not bind.");
    cur.pick.needs.forEach(function (d) {
      var label = document.createElement("label"), input = document.createElement("input"), vals = used[d] || [];
      label.textContent = d + " ";
      input.type = "number"; input.min = "1"; input.step = "1"; input.id = "pick-dim-" + d; input.title = (data.dims || {})[d] || "";
      if (vals.length) input.value = vals[0].value;
      label.appendChild(input);
      var src = document.createElement("small");
      src.id = "pick-src-" + d;
      src.textContent = vals.length ? "source: " + name(vals[0].model) : "no corpus model binds it: enter a value";
      label.appendChild(src);
      if (vals.length > 1) {
        var also = document.createElement("small");
        also.textContent = "in the corpus: ";
        vals.forEach(function (u, i) {
          var btn = document.createElement("button");
          btn.type = "button"; btn.textContent = u.value + " (" + name(u.model) + ")";
          btn.addEventListener("click", function () { input.value = u.value; src.textContent = "source: " + name(u.model); pickRecompute(); });
          if (i) also.appendChild(document.createTextNode(" "));
          also.appendChild(btn);
        });
        label.appendChild(also);
      }
      input.addEventListener("input", function () { src.textContent = "your value"; pickRecompute(); });
      pbinds.appendChild(label);
    });
  }
  function pickRecompute() {
    ptbody.textContent = "";
    var cur = current;
    if (!cur) return;
    var ctx = Number(pctx.value), env = Object.assign({}, cur.doc.env), missing = [], binds = [];
    if (!(ctx >= 1)) { pstatus.textContent = "Enter a context of at least one token."; return; }
    ["seq", "ctx", "length"].forEach(function (k) { env[k] = ctx; });
    var neu = Object.assign({}, env);
    cur.pick.needs.forEach(function (d) {
      var text = $("pick-dim-" + d).value.trim(), v = Number(text);
      if (text === "" || !(v >= 1) || Math.floor(v) !== v) missing.push(d); else { neu[d] = v; binds.push(d + "=" + v); }
    });
    var ticked = cur.pick.templates.filter(function (t) { return $("pick-tpl-" + t).checked; });
    if (!ticked.length) { pstatus.textContent = "Tick at least one layer template."; pstatus.removeAttribute("data-missing"); return; }
    cur.ticked = ticked;
    var swap = "layers[" + ticked.join(",") + "]." + cur.slotName + "=" + cur.comp;
    var cmd = "archledger edit " + cur.model + " --swap '" + swap + "'" + binds.map(function (b) { return " --bind " + b; }).join("") + " --context " + ctx + " --json";
    if (missing.length) {
      pstatus.textContent = "Unbound: " + missing.map(function (d) { return d + " (" + ((data.dims || {})[d] || "a dim") + ")"; }).join("; ")
        + ". Enter a positive whole number for each to see the numbers.";
      pstatus.setAttribute("data-missing", missing.join(","));
      return;
    }
    pstatus.removeAttribute("data-missing");
    pstatus.textContent = "Swap " + swap + ". The same on the command line: " + cmd;
    Object.keys(cur.doc.recomputed).forEach(function (key) {
      var o = F.evaluate(cur.doc.formulas[key], env), n = o + change(cur, key, neu);
      var tr = document.createElement("tr"), th = document.createElement("th");
      th.scope = "row"; th.textContent = cur.doc.recomputed[key][0]; tr.appendChild(th);
      [["old", o], ["new", n]].forEach(function (pair) {
        var td = document.createElement("td");
        td.className = "n"; td.setAttribute("data-k", key); td.setAttribute("data-side", pair[0]);
        td.setAttribute("data-v", String(pair[1]));
        td.appendChild(window.archNum(pair[1], show(key, pair[1]), null, null,
                                      "the engine's formula for " + cur.doc.recomputed[key][0] + " at the dims above"));
        tr.appendChild(td);
      });
      var d = document.createElement("td");
      d.textContent = o ? ((n - o) / o * 100).toFixed(1) + "%" : (n ? "new" : "");
      if (o && n > o) d.textContent = "+" + d.textContent;
      tr.appendChild(d);
      ptbody.appendChild(tr);
    });
    solRows(cur, env, neu);
  }
  // The SOL times (engine/playground/playground_sol.py): the base's planner programs at the pick's
  // parallel config as trees over the context, plus the pick's change (the planner's steps it adds
  // less those it removes, per layer template) as trees over its dims; each sum of per-step
  // max(compute, memory, link) terms is evaluated by formula.js. The pick carries one entry per
  // subset of its templates the reader may tick (key: the ticked templates, comma-joined), each
  // with its own config; they hold while the planner's decisions at the pre-filled binding stand
  // (the entry's ``valid`` trees): outside that, no number, and the reason.
  var SOL = [["prefill_sol_s", "prefill SOL"], ["decode_bytes", "decode bytes/GPU"], ["decode_sol_s", "decode SOL"]];
  function sum(trees, indices, env) {
    return indices.reduce(function (total, i) { return total + F.evaluate(trees[i], env); }, 0);
  }
  function solRows(cur, env, neu) {
    var all = cur.pick.sol, trees = cur.doc.sol_trees, why = null;
    if (!all) return;
    var s = all[cur.ticked.join(",")], base = s && s.config ? cur.doc.sol_base[s.config] : null;
    if (!s) why = "the build exported no plan for these layer templates";
    else if (s.error) why = "the planner refuses this swap at the pre-filled dims: " + s.error;
    else if (typeof base === "string" || !base) why = "the planner refuses the base on " + s.config + (base ? ": " + base : "");
    else {
      var bad = s.valid.filter(function (v) { return !F.evaluate(trees[v[0]], neu); }).map(function (v) { return v[1]; });
      if (bad.length) why = "outside the regime exported at the pre-filled dims (" + Object.keys(s.at).map(function (d) {
        return d + "=" + s.at[d]; }).join(", ") + "): " + bad.filter(function (r, i) { return bad.indexOf(r) === i; }).join("; ");
    }
    SOL.forEach(function (pair) {
      var key = pair[0], tr = document.createElement("tr"), th = document.createElement("th");
      th.scope = "row"; th.textContent = pair[1] + (s && s.config ? " (" + cur.doc.sol_setting.gpu + ", " + s.config + ")" : ""); tr.appendChild(th);
      if (why) {
        var td = document.createElement("td");
        td.colSpan = 3; td.className = "sol-none"; td.setAttribute("data-k", key); td.setAttribute("data-why", why);
        td.textContent = "not computed here: " + why + ". The command above prints it.";
        tr.appendChild(td); ptbody.appendChild(tr);
        return;
      }
      var ch = s.change[key];      // [added, removed] steps' trees, per layer template
      var o = F.evaluate(base[key], env), n = o + (sum(trees, ch[0], neu) - sum(trees, ch[1], neu));
      oldNew(tr, key, o, n, key === "decode_bytes" ? fmt.bytes : fmt.time,
             "the deploy planner's steps at " + s.config + " on " + cur.doc.sol_setting.gpu + ", summed at the dims above");
      ptbody.appendChild(tr);
    });
  }
  // new - old of one number (engine/playground/whatif.pick_change is the same in Python): the whole
  // walk's change, or at each site of the slot in the ticked templates the new filler's numbers
  // (at that site's layer count) in place of the old filler's
  function change(cur, key, env) {
    var p = cur.pick;
    if (p.delta) return F.evaluate(p.delta[key], env);
    var total = 0, old = cur.doc.old[cur.slotName].templates;
    Object.keys(old).forEach(function (t) { if (cur.ticked.indexOf(t) >= 0) total -= F.evaluate(old[t][key], env); });
    p.sites.forEach(function (site) {
      if (cur.ticked.indexOf(site[2]) < 0) return;
      var at = Object.assign({}, env);
      at[cur.doc.repeat] = F.evaluate(site[1], env);
      total += F.evaluate(cur.doc.blocks[site[0]][key], at);
    });
    return total;
  }
  // the swapped block's graph diff: the components pages draw each token mixer as a corpus model
  // instantiates it and every pair's diff (nodes paired by declared name); shown here from there.
  // Any other pair a live pick makes is drawn once for the corpus in data.diffs (old as the base
  // has it, new as the pick's walk puts it: site_builder/render.py _playground_diffs)
  var diffs = null;
  // the diff's key line (changed, only in old, only in new), built as nodes: the names and the
  // model's display name after it are corpus text (a spec's name: from a pull request), never markup
  function legend(box, old, comp) {
    var p = para(box, "");
    [["status-changed", "≠ changed"], ["status-only_a", "− only in " + old], ["status-only_b", "+ only in " + comp]].forEach(function (k, i) {
      var span = document.createElement("span");
      span.className = k[0]; span.textContent = k[1];
      if (i) p.appendChild(document.createTextNode(" · "));
      p.appendChild(span);
    });
    return p;
  }
  function pickGraph(slot, comp) {
    var drawn = data.drawn || [];
    slot.current.filter(function (c) { return c !== comp; }).forEach(function (old) {
      var box = document.createElement("div"), h = document.createElement("h3");
      h.textContent = "Graph diff of the swapped block: " + old + " (old) vs " + comp + " (new)";
      box.appendChild(h); pgraph.appendChild(box);
      if (drawn.indexOf(old) < 0 || drawn.indexOf(comp) < 0) {
        if (!data.diffs) { para(box, "Not drawn in this build."); return; }
        if (!diffs) diffs = window.archJSON(root + data.diffs);
        diffs.then(function (all) {
          var d = all[old + "--" + comp];
          if (!d) { para(box, "Not drawn: no live pick of this build puts " + comp + " where " + old + " is."); return; }
          legend(box, old, comp).appendChild(document.createTextNode(" · as in " + d.a_in + " (new: walked there)"));
          var wrap = document.createElement("div"); wrap.className = "graph-wrap"; box.appendChild(wrap);
          var svg = window.archSVG(d.svg);
          if (svg) wrap.appendChild(svg); else wrap.textContent = "No drawing for this pair.";
        }).catch(function (e) { para(box, "Could not load the drawing (" + e.message + ")."); });
        return;
      }
      var url = root + "components/diff/" + old + "--" + comp + "/";
      var full = document.createElement("a");
      full.href = url; full.textContent = "full page";
      var line = legend(box, old, comp); line.appendChild(document.createTextNode(" · ")); line.appendChild(full);
      var wrap = document.createElement("div"); wrap.className = "graph-wrap"; box.appendChild(wrap);
      fetch(url).then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); }).then(function (html) {
        var svg = window.archSVG(html, ".graph-wrap svg");
        if (svg) wrap.appendChild(svg); else wrap.textContent = "No drawing on " + url;
      }).catch(function (e) { wrap.textContent = "Could not load the drawing (" + e.message + ")."; });
    });
  }
  if (pm) {
    Object.keys(cat).forEach(function (m) { option(pm, m, cat[m].name); });
    pm.addEventListener("change", pickSlots); ps.addEventListener("change", pickComponents); pc.addEventListener("change", pickOut);
    pctx.addEventListener("input", pickRecompute);
    pickSlots();
  }
})();
