// Zoom and pan for the component drawings and graph diffs (.graph-wrap[data-panzoom]): the SVG keeps
// the page's width and a fixed height, and shows a window of the drawing by moving its viewBox.
// It opens fitted: the whole drawing, or on a graph diff the changed nodes (status-changed, -only_a,
// -only_b) centred, as large as fits up to natural size (one drawing unit per pixel) and never
// smaller than the whole drawing; buttons zoom in, zoom out, fit the whole drawing and reset to
// natural size at the top left; drag pans; Ctrl (or ⌘) + wheel and a
// trackpad pinch zoom about the pointer; with the drawing focused, + − 0 f and the arrow keys do
// the same. No library: the viewBox is the whole state.
(function () {
  "use strict";
  var STEP = 1.25, MIN_SCALE = 0.05, MAX_SCALE = 4, PAN_PX = 60, PAD = 24;

  function init(wrap) {
    var svg = wrap.querySelector("svg");
    if (!svg || wrap.archPanZoom || !svg.viewBox || !svg.viewBox.baseVal) return;
    var vb = svg.viewBox.baseVal, full = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    if (!(full.w > 0 && full.h > 0)) return;
    wrap.classList.add("panzoom");
    svg.style.maxWidth = "none";
    svg.setAttribute("width", "100%");
    svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
    var bar = document.createElement("div");
    bar.className = "panzoom-bar"; bar.setAttribute("role", "toolbar"); bar.setAttribute("aria-label", "Zoom and pan the drawing");
    var view = { x: full.x, y: full.y, w: full.w, h: full.h };
    function size() { return { w: wrap.clientWidth || 1, h: Math.max(320, Math.min(full.h, Math.round(window.innerHeight * 0.7))) }; }
    function apply() {
      svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].map(function (v) { return Math.round(v * 10) / 10; }).join(" "));
      zoomText.textContent = Math.round(100 * size().w / view.w) + "%";
    }
    function setScale(scale, cx, cy) {   // scale: pixels per drawing unit; (cx, cy): the drawing point kept in place
      var px = size(), s = Math.max(MIN_SCALE, Math.min(MAX_SCALE, scale));
      var fx = (cx - view.x) / view.w, fy = (cy - view.y) / view.h;
      view.w = px.w / s; view.h = px.h / s;
      view.x = cx - fx * view.w; view.y = cy - fy * view.h;
      apply();
    }
    function scaleNow() { return size().w / view.w; }
    function reset() {
      var px = size(); svg.style.height = px.h + "px";
      view = { x: full.x, y: full.y, w: px.w, h: px.h };   // natural size, top left
      apply();
    }
    function fit() {
      var px = size(), s = Math.min(px.w / full.w, px.h / full.h);
      view.w = px.w / s; view.h = px.h / s;
      view.x = full.x + (full.w - view.w) / 2; view.y = full.y + (full.h - view.h) / 2;
      apply();
    }
    // the box (drawing units) around the nodes a diff marks, from their data-x/y/w/h (graph_svg.py)
    function changed() {
      var nodes = svg.querySelectorAll(".node.status-changed, .node.status-only_a, .node.status-only_b");
      if (!nodes.length) return null;
      var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      Array.prototype.forEach.call(nodes, function (n) {
        var x = +n.getAttribute("data-x"), y = +n.getAttribute("data-y");
        x0 = Math.min(x0, x); y0 = Math.min(y0, y);
        x1 = Math.max(x1, x + +n.getAttribute("data-w")); y1 = Math.max(y1, y + +n.getAttribute("data-h"));
      });
      return { x: x0 - PAD, y: y0 - PAD, w: x1 - x0 + 2 * PAD, h: y1 - y0 + 2 * PAD };
    }
    function open() {
      var px = size(), box = changed();
      svg.style.height = px.h + "px";
      if (!box) { fit(); return; }
      var whole = Math.min(px.w / full.w, px.h / full.h);
      var s = Math.max(whole, Math.min(1, px.w / box.w, px.h / box.h));
      view.w = px.w / s; view.h = px.h / s;
      // centred on the changes, kept on the drawing where it is larger than the window
      view.x = box.x + box.w / 2 - view.w / 2; view.y = box.y + box.h / 2 - view.h / 2;
      view.x = view.w >= full.w ? full.x + (full.w - view.w) / 2 : Math.max(full.x, Math.min(view.x, full.x + full.w - view.w));
      view.y = view.h >= full.h ? full.y + (full.h - view.h) / 2 : Math.max(full.y, Math.min(view.y, full.y + full.h - view.h));
      apply();
    }
    function zoom(f) { setScale(scaleNow() * f, view.x + view.w / 2, view.y + view.h / 2); }
    function pan(dxPx, dyPx) { var s = scaleNow(); view.x += dxPx / s; view.y += dyPx / s; apply(); }
    function button(label, text, act, cls) {
      var b = document.createElement("button"); b.type = "button"; b.className = cls; b.textContent = text;
      b.setAttribute("aria-label", label); b.title = label; b.addEventListener("click", act); bar.appendChild(b); return b;
    }
    button("Zoom in", "+", function () { zoom(STEP); }, "zoom-in");
    button("Zoom out", "\u2212", function () { zoom(1 / STEP); }, "zoom-out");
    button("Fit the whole drawing", "Fit", fit, "zoom-fit");
    button("Reset to natural size", "Reset", reset, "zoom-reset");
    var zoomText = document.createElement("span"); zoomText.className = "zoom-level"; zoomText.setAttribute("aria-live", "polite"); bar.appendChild(zoomText);
    var hint = document.createElement("span"); hint.className = "hint";
    hint.textContent = "drag to pan · Ctrl + wheel to zoom · keys: + − 0 f, arrows";
    bar.appendChild(hint);
    wrap.parentNode.insertBefore(bar, wrap);
    wrap.tabIndex = 0;
    wrap.setAttribute("aria-label", "Drawing: focus it and use + and − to zoom, arrow keys to pan, 0 to reset, f to fit");

    // drag to pan (a click without movement still reaches a node)
    var drag = null;
    svg.addEventListener("pointerdown", function (e) {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, moved: false, id: e.pointerId };
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag || e.pointerId !== drag.id) return;
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) { drag.moved = true; svg.setPointerCapture(e.pointerId); wrap.classList.add("dragging"); }
      drag.x = e.clientX; drag.y = e.clientY;
      pan(-dx, -dy);
    });
    function end(e) { if (drag && e.pointerId === drag.id) { drag = null; wrap.classList.remove("dragging"); } }
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    // Ctrl/⌘ + wheel (and pinch, which browsers report as Ctrl + wheel) zooms about the pointer;
    // a plain wheel keeps scrolling the page
    svg.addEventListener("wheel", function (e) {
      if (!(e.ctrlKey || e.metaKey)) return;
      e.preventDefault();
      var r = svg.getBoundingClientRect(), s = scaleNow();
      var cx = view.x + (e.clientX - r.left) / s, cy = view.y + (e.clientY - r.top) / s;
      setScale(s * Math.exp(-e.deltaY * 0.002), cx, cy);
    }, { passive: false });
    wrap.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      var keys = { "+": function () { zoom(STEP); }, "=": function () { zoom(STEP); }, "-": function () { zoom(1 / STEP); },
        "0": reset, "f": fit, "ArrowLeft": function () { pan(-PAN_PX, 0); }, "ArrowRight": function () { pan(PAN_PX, 0); },
        "ArrowUp": function () { pan(0, -PAN_PX); }, "ArrowDown": function () { pan(0, PAN_PX); } };
      if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
    });
    var width = wrap.clientWidth;
    window.addEventListener("resize", function () {   // keep the scale, follow the new width
      if (wrap.clientWidth === width) return;
      var s = scaleNow(), px = size(); width = wrap.clientWidth;
      svg.style.height = px.h + "px"; view.w = px.w / s; view.h = px.h / s; apply();
    });
    wrap.archPanZoom = { zoom: zoom, pan: pan, fit: fit, reset: reset, view: function () { return Object.assign({}, view); } };
    open();
  }
  window.archPanZoom = init;
  Array.prototype.forEach.call(document.querySelectorAll(".graph-wrap[data-panzoom]"), init);
})();
