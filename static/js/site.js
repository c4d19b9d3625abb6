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
  // Keyboard: a number is not a tab stop of its own (a large model page has over a thousand). Each
  // group of numbers (a table, a card list, else the nearest list, paragraph, figure or section) is
  // one tab stop: its first number, then the one last reached (a roving tabindex); the arrow keys
  // move within the group (left/right: the previous/next number; up/down: in a table, the nearest
  // number in the same column of the rows above/below, elsewhere as left/right), Home/End to its
  // first/last. Reaching a number shows its formula, as focus always did. Numbers drawn later
  // (the per-op and deploy tables) join their group as they are added (a MutationObserver).
  var GROUP = "table, dl, ul, ol, p, figure, section, main";
  function groupOf(el) { return el.closest(GROUP) || document.body; }
  function membersOf(g) {
    return Array.prototype.filter.call(g.querySelectorAll(".num"), function (n) { return groupOf(n) === g; });
  }
  var roving = false;
  function rove() {
    roving = false;
    Array.prototype.forEach.call(document.querySelectorAll(".num"), function (n) {
      var g = groupOf(n);
      if (g.archStop && g.archStop !== n && g.contains(g.archStop)) { if (n.tabIndex !== -1) n.tabIndex = -1; return; }
      g.archStop = n; n.tabIndex = 0;
    });
    scrollers();
  }
  // A box that scrolls (a wide table's wrapper, a long code block) with nothing focusable inside
  // is itself a tab stop, so the keyboard can scroll it (axe: scrollable-region-focusable); named
  // by its table's caption.
  function scrollers() {
    Array.prototype.forEach.call(document.querySelectorAll(".table-wrap, pre"), function (el) {
      if (el.hasAttribute("tabindex") || (el.scrollWidth <= el.clientWidth + 1 && el.scrollHeight <= el.clientHeight + 1)) return;
      if (el.querySelector("a[href], button, input, select, textarea, [tabindex='0']")) return;
      var cap = el.querySelector("caption");
      el.tabIndex = 0; el.setAttribute("role", "group");
      el.setAttribute("aria-label", "scrollable " + (cap ? "table: " + cap.textContent.slice(0, 80) : el.tagName === "PRE" ? "code" : "table"));
    });
  }
  rove();
  new MutationObserver(function (records) {       // the tooltip's own text changes are not new numbers
    if (roving || records.every(function (r) { return tip.contains(r.target); })) return;
    roving = true; setTimeout(rove, 0);
  })
    .observe(document.body, { childList: true, subtree: true });
  function column(el, g, step) {       // the nearest number in el's column, ``step`` rows on
    var td = el.closest("td, th"), tr = td && td.parentElement;
    if (!tr || tr.closest("table") !== g) return undefined;
    for (var i = tr.rowIndex + step; i >= 0 && i < g.rows.length; i += step) {
      var cell = g.rows[i].cells[td.cellIndex], n = cell && cell.querySelector(".num");
      if (n && groupOf(n) === g) return n;
    }
    return null;
  }
  document.addEventListener("keydown", function (e) {
    var el = e.target;
    if (!el.classList || !el.classList.contains("num") || e.altKey || e.ctrlKey || e.metaKey) return;
    var g = groupOf(el), all = membersOf(g), i = all.indexOf(el), to;
    if (e.key === "ArrowRight") to = all[i + 1];
    else if (e.key === "ArrowLeft") to = all[i - 1];
    else if (e.key === "Home") to = all[0];
    else if (e.key === "End") to = all[all.length - 1];
    else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      var step = e.key === "ArrowDown" ? 1 : -1;
      to = column(el, g, step);
      if (to === undefined) to = all[i + step];
    } else return;
    e.preventDefault();                // the arrows move between numbers, not the page
    if (!to || to === el) return;
    el.tabIndex = -1; to.tabIndex = 0; g.archStop = to; to.focus();
  });
  // Charts: every chart on every page type is drawn through archChart, the one loader. The chart
  // library (static/vendor/vega-embed.js, ~900 kB, the bulk of a page's weight) is inserted as a
  // script only when the first chart comes within a screen of the viewport, once per page; a chart
  // is drawn when it comes into view, with the latest spec its page gave it (a spec given while the
  // chart is out of view replaces the one waiting). Resolves to vega-embed's result once drawn, or
  // null when a newer spec took over first. The library's URL is the site.js tag's data-vega.
  var VEGA = (document.currentScript && document.currentScript.getAttribute("data-vega")) || "", library = null;
  function loadLibrary() {
    if (window.vegaEmbed) return Promise.resolve(window.vegaEmbed);
    if (!library) library = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = VEGA;
      s.onload = function () { window.vegaEmbed ? resolve(window.vegaEmbed) : reject(new Error("the chart library defined no vegaEmbed")); };
      s.onerror = function () { library = null; reject(new Error("could not load the chart library " + VEGA)); };
      document.head.appendChild(s);
    });
    return library;
  }
  var seen = typeof IntersectionObserver === "undefined" ? null : new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      seen.unobserve(e.target); e.target.archVisible = true;
      var wait = e.target.archWaiting, then = e.target.archOnSeen || [];
      e.target.archWaiting = null; e.target.archOnSeen = null;
      then.forEach(function (fn) { fn(); });
      if (wait) draw(e.target, wait.spec).then(wait.resolve, wait.reject);
    });
  }, { rootMargin: "200px 0px" });
  function draw(el, spec) {
    return loadLibrary().then(function (embed) {
      return embed(el, spec, { actions: false, renderer: "svg" }).then(function (result) { chartReadable(el, result); return result; });
    });
  }
  // A drawn chart reads without a mouse: the chart is one tab stop whose arrow keys step through
  // its marks, each mark's own description (vega's aria-label: its tooltip fields) shown in the
  // formula tooltip beside it; and the same descriptions, one row per mark, in a table under the
  // chart (its text alternative, beyond the caption), rebuilt on every redraw.
  function chartReadable(el) {
    var items = Array.prototype.filter.call(el.querySelectorAll("svg [aria-label]"), function (n) {
      return n.getAttribute("role") === "graphics-symbol" && /: /.test(n.getAttribute("aria-label")) &&
        !n.closest(".role-axis, .role-legend, .role-title");      // the data's marks, not the axes and legends
    });
    el.archItems = items; el.archAt = -1;
    el.tabIndex = 0; el.setAttribute("role", "group");
    el.setAttribute("aria-label", "Chart of " + items.length + " marks: the arrow keys read each; the table below lists them");
    if (el.archTable) el.archTable.remove();
    var rows = items.map(function (n) {
      var row = {};
      n.getAttribute("aria-label").split("; ").forEach(function (part) {
        var i = part.indexOf(": "); if (i > 0) row[part.slice(0, i)] = part.slice(i + 2);
      });
      return row;
    }), keys = [];
    rows.forEach(function (r) { Object.keys(r).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); }); });
    var details = document.createElement("details"), summary = document.createElement("summary");
    details.className = "chart-data"; summary.textContent = "The chart's data (" + rows.length + " marks)";
    details.appendChild(summary);
    var wrap = document.createElement("div"), table = document.createElement("table"), head = table.createTHead().insertRow(), body = table.createTBody();
    wrap.className = "table-wrap"; table.className = "data";
    keys.forEach(function (k) { var th = document.createElement("th"); th.scope = "col"; th.textContent = k; head.appendChild(th); });
    rows.forEach(function (r) { var tr = body.insertRow(); keys.forEach(function (k) { tr.insertCell().textContent = r[k] === undefined ? "" : r[k]; }); });
    wrap.appendChild(table); details.appendChild(wrap);
    el.parentNode.insertBefore(details, el.nextSibling);
    el.archTable = details;
  }
  function chartKey(el, e) {
    var items = el.archItems, n = items.length, at = el.archAt;
    var to = { ArrowRight: at + 1, ArrowDown: at + 1, ArrowLeft: at - 1, ArrowUp: at - 1, Home: 0, End: n - 1 }[e.key];
    if (to === undefined || !n) return;
    e.preventDefault();
    el.archAt = Math.max(0, Math.min(n - 1, to));
    var item = items[el.archAt];
    tip.textContent = item.getAttribute("aria-label");
    tip.hidden = false; place(item);
    el.setAttribute("aria-describedby", "tip");
  }
  document.addEventListener("keydown", function (e) { var el = document.activeElement; if (el && el.archItems) chartKey(el, e); });
  document.addEventListener("focusout", function (e) { if (e.target.archItems) hide(e.target); });
  // ``fn`` once ``el`` has come into view (at once if it has): a chart whose data is costly to
  // fetch (the deploy page's front) fetches it then, through the same watch as the library.
  window.archWhenSeen = function (el, fn) {
    if (el.archVisible || !seen) { fn(); return; }
    (el.archOnSeen = el.archOnSeen || []).push(fn);
    seen.observe(el);
  };
  window.archChart = function (el, spec) {
    if (typeof el === "string") el = document.querySelector(el);
    if (!el) return Promise.resolve(null);
    if (!spec) {                       // no chart here now: nothing waits, no table of an old one
      if (el.archWaiting) { el.archWaiting.resolve(null); el.archWaiting = null; }
      if (el.archTable) { el.archTable.remove(); el.archTable = null; }
      return Promise.resolve(null);
    }
    if (el.archVisible || !seen) return draw(el, spec);
    if (el.archWaiting) el.archWaiting.resolve(null);      // superseded before it was seen
    return new Promise(function (resolve, reject) {
      el.archWaiting = { spec: spec, resolve: resolve, reject: reject };
      seen.observe(el);
    });
  };
  window.archNum = function (value, text, formula, node, definition, dims) {
    var s = document.createElement("span");
    if (dims) s.archDims = dims;   // {dim: value} for the "where" line (pages of several models)
    s.className = "num"; s.tabIndex = -1; s.textContent = text;   // its group's tab stop: rove()
    if (formula) s.setAttribute("data-f", formula);
    if (definition) s.setAttribute("data-d", definition);
    if (node) s.setAttribute("data-n", node);
    return s;
  };
  // The one number formatter: an interpreter of the rule engine/cli/units.py FORMAT defines as data
  // (digits, SI prefixes, time scales, token suffixes), shipped on the site.js tag's data-fmt
  // (tests/test_site_format.py holds it to units.py string for string). The value is rounded to the
  // rule's digits before a prefix is chosen (toPrecision: ties away from zero, as units.round_sig).
  var tag = document.querySelector("script[data-fmt]"), RULE = tag && JSON.parse(tag.getAttribute("data-fmt"));
  function round(v) { return v ? Number(Number(v).toPrecision(RULE.digits)) : 0; }
  function mant(v) { return String(round(v)); }
  function scaled(v, scales, unit) {
    if (v === null || v === undefined) return RULE.none;
    var r = round(v);
    for (var i = 0; i < scales.length; i++) if (Math.abs(r) >= scales[i][1]) return mant(r / scales[i][1]) + " " + scales[i][0] + unit;
    return (mant(r) + " " + unit).trim();
  }
  if (RULE) window.archFmt = {
    si: function (v, unit) { return scaled(v, RULE.si, unit || ""); },
    bytes: function (v) { return scaled(v, RULE.si, RULE.bytes); },
    time: function (s) {
      var T = RULE.time, last = T.scales[T.scales.length - 1];
      if (s === null || s === undefined) return RULE.none;
      var r = round(s);
      if (Math.abs(r) >= T.whole_from) return Math.round(r).toLocaleString("en-US") + " " + T.unit;
      if (r === 0) return "0 " + T.unit;
      for (var i = 0; i < T.scales.length; i++) if (Math.abs(r) >= T.scales[i][1] * (1 - T.slack)) return mant(r / T.scales[i][1]) + " " + T.scales[i][0];
      return mant(r / last[1]) + " " + last[0];
    },
    tokens: function (v) {
      for (var i = 0; i < RULE.tokens.length; i++) if (v >= RULE.tokens[i][1] && v % RULE.tokens[i][1] === 0) return v / RULE.tokens[i][1] + RULE.tokens[i][0];
      return Number(v).toLocaleString("en-US");
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
