// Formula tooltips: every .num carries its formula (data-f) and node (data-n); on hover or keyboard
// focus the tooltip shows the formula, the values of the dims it names, and the node.
(function () {
  "use strict";
  var data = {};
  try { data = JSON.parse(document.getElementById("page-data").textContent || "{}"); } catch (e) { data = {}; }
  window.ARCH_PAGE = data;
  var tip = document.getElementById("tip");
  // the dims a number's formula is taken at: its own (archNum's dims), its model's row on a page of
  // many models (data-m -> page data "bounds"), else the page's one model ("bound")
  function dimsOf(el) {
    if (el.archDims) return el.archDims;
    var row = el.closest("[data-m]");
    if (row && data.bounds) return data.bounds[row.getAttribute("data-m")] || {};
    return data.bound || {};
  }
  function bound(formula, el) {
    var dims = dimsOf(el), seen = {}, out = [];
    (formula.match(/[A-Za-z_][A-Za-z_0-9]*/g) || []).forEach(function (name) {
      if (Object.prototype.hasOwnProperty.call(dims, name) && !seen[name]) { seen[name] = 1; out.push(name + " = " + dims[name]); }
    });
    return out.join(", ");
  }
  function show(el) {
    // data-dk: a definition shared by a column, sent once in the page data ("defs")
    // data-fk: a formula numbered in the page's formula file (data.formulas_src, loaded below)
    var f = el.getAttribute("data-f") || (el.hasAttribute("data-fk") ? (data.formulas || [])[el.getAttribute("data-fk")] : null);
    var d = el.getAttribute("data-d") || (data.defs || {})[el.getAttribute("data-dk")];
    if (!f && !d) return;
    tip.textContent = "";
    if (!f) { var def = document.createElement("div"); def.className = "def"; def.textContent = d; tip.appendChild(def); }   // prose, not a formula
    else { var code = document.createElement("code"); code.textContent = "= " + f; tip.appendChild(code); }
    var b = f ? [el.getAttribute("data-w"), bound(f, el)].filter(Boolean).join(", ") : "";   // data-w: a value the number is taken at (e.g. length = 32768)
    if (b) { var p = document.createElement("div"); p.className = "bound"; p.textContent = "where " + b; tip.appendChild(p); }
    var row = el.getAttribute("data-n") ? el : el.closest("[data-n]"), n = row && row.getAttribute("data-n");   // a table row names its node once
    if (n) { var q = document.createElement("div"); q.className = "node"; q.textContent = "from " + n; tip.appendChild(q); }
    tip.hidden = false;
    place(el);
    el.setAttribute("aria-describedby", "tip");
  }
  // The tooltip stays in the viewport: below the number when it fits there, else above, else on
  // the roomier side with its height clamped to that room (it scrolls); never over the number
  // (the pointer would leave it); left-aligned with the number, moved left as far as the right
  // edge needs.
  var GAP = 6, EDGE = 8;
  function place(el) {
    var r = el.getBoundingClientRect(), vw = document.documentElement.clientWidth,
      vh = document.documentElement.clientHeight;
    tip.style.maxHeight = ""; tip.style.overflowY = "";
    tip.style.left = window.scrollX + "px"; tip.style.top = window.scrollY + "px";   // measured unsqueezed
    var below = vh - r.bottom - GAP - EDGE, above = r.top - GAP - EDGE, h = tip.offsetHeight, top;
    if (h > below && h > above) {
      tip.style.maxHeight = Math.max(48, below, above) + "px"; tip.style.overflowY = "auto";
      h = tip.offsetHeight;
    }
    top = h <= below || below >= above ? r.bottom + GAP : r.top - GAP - h;
    var left = Math.max(EDGE, Math.min(r.left, vw - tip.offsetWidth - EDGE));
    tip.style.left = (window.scrollX + left) + "px";
    tip.style.top = (window.scrollY + top) + "px";
  }
  function hide(el) { tip.hidden = true; if (el && el.removeAttribute) el.removeAttribute("aria-describedby"); }
  document.addEventListener("mouseover", function (e) { var el = e.target.closest && e.target.closest(".num"); if (el) show(el); });
  document.addEventListener("mouseout", function (e) { var el = e.target.closest && e.target.closest(".num"); if (el) hide(el); });
  document.addEventListener("focusin", function (e) { if (e.target.classList && e.target.classList.contains("num")) show(e.target); });
  document.addEventListener("focusout", function (e) { if (e.target.classList && e.target.classList.contains("num")) hide(e.target); });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") hide(document.activeElement); });
  // a page whose tooltips are numbered (data-fk) loads their texts once it is drawn
  if (data.formulas_src) window.addEventListener("load", function () {
    window.archJSON(data.formulas_src).then(function (list) { data.formulas = list; })
      .catch(function (e) { console.error("formulas: " + e.message); });
  });
  // structure drawings below the first load when their <details> opens (keeps pages light)
  Array.prototype.forEach.call(document.querySelectorAll("details.level"), function (d) {
    d.addEventListener("toggle", function () {
      var wrap = d.querySelector(".graph-wrap");
      if (!d.open || !wrap || wrap.firstElementChild || !wrap.getAttribute("data-src")) return;
      window.archText(wrap.getAttribute("data-src"))
        .then(function (svg) {
          var node = window.archSVG(svg);
          if (!node) return;
          wrap.appendChild(node);
          if (wrap.hasAttribute("data-panzoom") && window.archPanZoom) window.archPanZoom(wrap);   // a wide drawing (panzoom.js)
        })
        .catch(function (e) { wrap.textContent = "Could not load this drawing (" + e.message + ")."; });
    });
  });
  // a link to a drawing (#c-...) opens its <details> (which loads the drawing)
  // The hash is whatever the reader's link holds: one that is not valid percent-encoding (#%E0%A4%A)
  // makes decodeURIComponent throw, which would stop this file before archJSON and the rest are
  // defined (and with them every page's scripts); such a hash names no drawing, so it is ignored.
  function openTarget() {
    var id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS" && !el.open) { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  // forms here filter in place: Enter never navigates
  Array.prototype.forEach.call(document.querySelectorAll("form.filters"), function (f) {
    f.addEventListener("submit", function (e) { e.preventDefault(); });
  });
  // JSON the build wrote gzip-compressed (site_builder/render.py Site.gzip_json: the model documents
  // and the deploy pages' formula files): fetched and inflated here. A host that sends the file with
  // Content-Encoding: gzip has the browser inflate it first, so the magic bytes decide.
  // The drawings below a model page's first (Site.gzip_text) are inflated the same way (archText).
  window.archText = function (url) {
    return fetch(url).then(function (r) { if (!r.ok) throw new Error(url + ": " + r.status); return r.arrayBuffer(); })
      .then(function (buffer) {
        var b = new Uint8Array(buffer);
        if (b.length > 1 && b[0] === 0x1f && b[1] === 0x8b)
          return new Response(new Blob([buffer]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
        return new TextDecoder().decode(b);
      });
  };
  window.archJSON = function (url) { return window.archText(url).then(JSON.parse); };
  // The one place a script turns markup into nodes: the build's own drawings (site_builder/graph_svg.py,
  // which escapes every label; the page's scripts write all other text with textContent). ``text`` is
  // parsed inert (DOMParser runs nothing and loads nothing); the first element matching ``selector``
  // (default: svg) is adopted once whatever could run is gone, so a drawing carries no script even
  // if escaping ever failed: script-bearing elements, on* handlers, and links other than in-page or
  // plain relative ones. Returns null when there is no such element.
  var ACTIVE = "script, foreignObject, iframe, object, embed, use, animate, set, handler, listener";
  window.archSVG = function (text, selector) {
    var svg = new DOMParser().parseFromString(text, "text/html").querySelector(selector || "svg");
    if (!svg) return null;
    Array.prototype.forEach.call(svg.querySelectorAll(ACTIVE), function (el) { el.remove(); });
    [svg].concat(Array.prototype.slice.call(svg.querySelectorAll("*"))).forEach(function (el) {
      Array.prototype.slice.call(el.attributes).forEach(function (a) {
        var link = /(^|:)href$/i.test(a.name), url = a.value.replace(/[\u0000-\u0020]/g, "");
        if (/^on/i.test(a.name) || (link && /^[^#/?]*:/.test(url))) el.removeAttribute(a.name);
      });
    });
    return document.importNode(svg, true);
  };
  window.archNum = function (value, text, formula, node, definition, dims) {
    var s = document.createElement("span");
    if (dims) s.archDims = dims;   // {dim: value} for the "where" line (pages of several models)
    s.className = "num"; s.tabIndex = 0; s.textContent = text;
    if (formula) s.setAttribute("data-f", formula);
    if (definition) s.setAttribute("data-d", definition);
    if (node) s.setAttribute("data-n", node);
    return s;
  };
  // The one number formatter, mirroring engine/cli/units.py string for string (tests/test_site_format.py):
  // SI prefixes for counts and FLOPs (G, never B: B is the byte), decimal bytes (kB, MB, GB) for every
  // byte figure (one unit per line and table), times in fs/ps/ns/µs/ms/s, 3 significant
  // digits without trailing zeros, 0 prints 0. The value is rounded before the prefix is chosen.
  var NONE = "\u2014", SI = [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]],
    TIME = [["s", 1], ["ms", 1e-3], ["\u00b5s", 1e-6], ["ns", 1e-9], ["ps", 1e-12], ["fs", 1e-15]];
  function round3(v) { return v ? Number(Number(v).toPrecision(3)) : 0; }
  function mant(v) { return String(Number(Number(v).toPrecision(3))); }
  function scaled(v, unit) {
    if (v === null || v === undefined) return NONE;
    var r = round3(v);
    for (var i = 0; i < SI.length; i++) if (Math.abs(r) >= SI[i][1]) return mant(r / SI[i][1]) + " " + SI[i][0] + unit;
    return (mant(r) + " " + unit).trim();
  }
  window.archFmt = {
    si: function (v, unit) { return scaled(v, unit || ""); },
    bytes: function (v) { return scaled(v, "B"); },
    time: function (s) {
      if (s === null || s === undefined) return NONE;
      var r = round3(s);
      if (Math.abs(r) >= 1000) return Math.round(r).toLocaleString("en-US") + " s";
      if (r === 0) return "0 s";
      for (var i = 0; i < TIME.length; i++) if (Math.abs(r) >= TIME[i][1] * (1 - 1e-12)) return mant(r / TIME[i][1]) + " " + TIME[i][0];
      return mant(r / 1e-15) + " fs";
    },
    tokens: function (v) {
      if (v % 1048576 === 0 && v >= 1048576) return v / 1048576 + "M";
      return v % 1024 === 0 && v >= 1024 ? v / 1024 + "K" : Number(v).toLocaleString("en-US");
    }
  };
})();
// Sortable tables (table.sortable): a header's button sorts the body rows by that column's cells'
// data-v (numbers as numbers, an empty value last), ascending then descending; aria-sort says which.
(function () {
  "use strict";
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    heads.forEach(function (th, col) {
      var button = th.querySelector("button"); if (!button) return;
      button.addEventListener("click", function () {
        var asc = th.getAttribute("aria-sort") !== "ascending", body = table.tBodies[0];
        heads.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows);
        function key(r) { var c = r.cells[col]; return c ? c.getAttribute("data-v") || "" : ""; }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (x === "" || y === "") return (x === "") - (y === "");        // empty cells last either way
          var nx = Number(x), ny = Number(y), c = isFinite(nx) && isFinite(ny) ? nx - ny : x.localeCompare(y);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
