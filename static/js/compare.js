// Compare: two models side by side, block by block; the pair lives in the URL (?a=&b=).
(function () {
  "use strict";
  var root = document.documentElement.getAttribute("data-root") || "";
  var form = document.getElementById("pair"), out = document.getElementById("compare"), fmt = window.archFmt;
  var params = new URLSearchParams(location.search);
  if (params.get("a")) form.elements.a.value = params.get("a");
  if (params.get("b")) form.elements.b.value = params.get("b"); else if (form.elements.b.options.length > 1) form.elements.b.selectedIndex = 1;
  function load(slug) { return fetch(root + "data/models/" + slug + ".json").then(function (r) { if (!r.ok) throw new Error(slug); return r.json(); }); }
  function dims(m) { var d = {}; (m.dims || []).forEach(function (x) { d[x.name] = x.value; }); return d; }
  function cell(q, text, node, m) { var td = document.createElement("td"); td.className = "n"; if (q) td.appendChild(window.archNum(q.value, text, q.formula, node, null, m && dims(m))); else td.textContent = "—"; return td; }
  function render(a, b) {
    out.textContent = "";
    var h = document.createElement("h2"); h.textContent = a.name + " vs " + b.name; out.appendChild(h);
    var t = document.createElement("table"); t.className = "data";
    var head = t.createTHead().insertRow(); ["", a.name, b.name].forEach(function (x) { var th = document.createElement("th"); th.scope = "col"; th.textContent = x; head.appendChild(th); });
    var body = t.createTBody();
    [["Parameters", "params_total", fmt.si], ["Active per token (with embedding)", "params_active", fmt.si], ["Layers", "n_layers", String], ["Max context", "max_context", fmt.tokens],
     ["KV per token (BF16)", "kv_bytes_per_token_growing", fmt.bytes], ["Checkpoint bytes", "checkpoint_bytes", fmt.bytes]].forEach(function (r) {
      var tr = body.insertRow(); var th = document.createElement("th"); th.scope = "row"; th.textContent = r[0]; tr.appendChild(th);
      [a, b].forEach(function (m) { var q = m.overview[r[1]]; tr.appendChild(cell(q, r[2](q.value), "", m)); });
    });
    out.appendChild(t);
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
      col.appendChild(tb); grid.appendChild(col);
    });
    out.appendChild(grid);
  }
  function update() {
    var a = form.elements.a.value, b = form.elements.b.value;
    history.replaceState(null, "", "?a=" + encodeURIComponent(a) + "&b=" + encodeURIComponent(b));
    Promise.all([load(a), load(b)]).then(function (m) { render(m[0], m[1]); }).catch(function (e) { out.textContent = "Unknown model: " + e.message; });
  }
  form.addEventListener("change", update);
  update();
})();
