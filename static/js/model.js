// The model page's per-op table, drawn from the model document the build wrote
// (data/models/<org--name>.json, the JSON the page links) when its <details> is open: at once, as it
// starts open, after the page has painted. The table is most of a large model's page (DeepSeek-V4-Pro:
// ~600 ops, 337 KB of HTML), so it is not in the HTML; its numbers are the document's, formatted by
// the one formatter (archFmt) with their formula, node and definition on hover like every number.
(function () {
  "use strict";
  var details = document.getElementById("op-details");
  var wrap = details && details.querySelector("[data-doc]");
  if (!wrap) return;
  var fmt = window.archFmt, defs = (window.ARCH_PAGE || {}).defs || {}, NONE = "\u2014";
  var HEAD = ["op", "primitive", "output axes", "params", "\u00d7 layers", "prefill FLOPs", "prefill bytes",
              "intensity", "decode FLOPs", "decode bytes"];

  function cell(tr, content) {
    var td = document.createElement("td");
    if (typeof content === "string") td.textContent = content; else td.appendChild(content);
    tr.appendChild(td);
    return td;
  }
  function number(tr, content) { var td = cell(tr, content); td.className = "n"; return td; }
  function quantity(q, text) { return window.archNum(q.value, text, q.formula); }        // node: the row's data-n
  function bytes(v) { return v === undefined ? NONE : window.archNum(v, fmt.bytes(v), null, null, defs.bytes); }
  function flops(q) { return q ? quantity(q, fmt.si(q.value)) : NONE; }
  function code(text) { var c = document.createElement("code"); c.textContent = text; return c; }

  function draw(doc) {
    var table = document.createElement("table"); table.className = "data"; table.id = "op-table";
    var head = table.createTHead().insertRow();
    HEAD.forEach(function (h) { var th = document.createElement("th"); th.scope = "col"; th.textContent = h; head.appendChild(th); });
    var body = table.createTBody();
    doc.ops.forEach(function (o) {
      var tr = body.insertRow(); tr.setAttribute("data-n", o.uid);
      cell(tr, code(o.uid)); cell(tr, o.op);
      var axes = document.createElement("small"); axes.textContent = o.out_shape.join(", "); cell(tr, axes);
      var params = number(tr, quantity(o.params, fmt.si(o.params.value)));
      if (o.instances.value !== 1) {   // stored per expert (or instance): say so, with how many and how many active
        var note = document.createElement("small");
        note.appendChild(document.createTextNode("per " + (o.role === "experts" ? "expert" : "instance") + " \u00d7 "));
        note.appendChild(quantity(o.instances, String(o.instances.value)));
        if (o.active.value !== o.instances.value) {
          note.appendChild(document.createTextNode(", "));
          note.appendChild(quantity(o.active, String(o.active.value)));
          note.appendChild(document.createTextNode(" active"));
        }
        params.appendChild(document.createElement("br")); params.appendChild(note);
      }
      number(tr, quantity(o.repeat, String(o.repeat.value)));
      number(tr, flops(o.flops_prefill)); number(tr, bytes(o.bytes_prefill));
      number(tr, o.intensity_prefill ? o.intensity_prefill.toFixed(1) : NONE);
      number(tr, flops(o.flops_decode)); number(tr, bytes(o.bytes_decode));
    });
    wrap.textContent = ""; wrap.appendChild(table);
  }

  function load() {
    if (!details.open || wrap.archLoading) return;
    wrap.archLoading = true;
    window.archJSON(wrap.getAttribute("data-doc"))
      .then(draw)
      .catch(function (e) { wrap.textContent = "Could not load the per-op table (" + e.message + "); it is also in ops.csv."; wrap.archLoading = false; });
  }
  details.addEventListener("toggle", function () { if (!wrap.querySelector("table")) load(); });
  load();
})();
