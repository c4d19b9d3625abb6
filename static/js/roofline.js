// Roofline of the deployment shown: one point per op of the step (arithmetic intensity FLOP/byte vs
// attained FLOP/s) under the GPU's roofs, each dtype's ridge point marked. The deployment page's
// script announces the per-op rows it renders with
//   document.dispatchEvent(new CustomEvent("arch:ops", {detail: {rows, gpu, phase}}))
// (rows: the per-op records {phase, op_uid, kind, flops, bytes, t_sol_s, bound, t_expected_s, measured,
// intensity, attained_flops_per_s: engine/deploy/rules.py STEP's, computed by deploy_eval.js},
// drawn for ``phase``
// when given; gpu: its name, or an
// object shaped like the page data's gpus[name]). The roofs come from the build (landscape.json
// "gpus", page data "gpus"); this file only picks the rows' coordinates and draws the build's spec
// (site_builder/charts.py roofline_spec): chart glue, no arithmetic.
(function () {
  "use strict";
  var el = document.getElementById("chart-roofline"), note = document.getElementById("roofline-note");
  if (!el) return;
  var fmt = window.archFmt;
  function page() { return window.ARCH_PAGE || {}; }
  function gpuOf(gpu) {
    if (gpu && typeof gpu === "object") return gpu;
    return (page().gpus || {})[gpu] || null;
  }
  function draw(detail) {
    var gpu = gpuOf(detail.gpu), spec = (page().specs || {}).roofline;
    if (!gpu || !spec) { window.archChart(el, null); el.textContent = ""; if (note) note.textContent = "No roofline for this GPU."; return; }
    var rows = detail.rows || [], drawn = [], left = 0;
    var phase = detail.phase || null;   // rows may carry both phases: draw the one asked for
    rows.forEach(function (r) {
      if (phase && r.phase && r.phase !== phase) return;
      if (r.flops > 0 && r.bytes > 0 && r.t_sol_s > 0) {
        // expected: where the op's expected time comes from (charts.py EXPECTED_SOURCES)
        drawn.push({ op: r.op_uid, kind: r.kind, bound: r.bound, t_sol_s: r.t_sol_s, t_expected_s: r.t_expected_s,
                     expected: r.measured ? "measured table" : "bound / default efficiency",
                     intensity: r.intensity, attained: r.attained_flops_per_s });   // deploy_eval.js opRows (rules.STEP)
      } else left++;
    });
    var bw = gpu.hbm_bytes_per_s.value, roofs = Object.keys(gpu.peaks).map(function (d) {
      return { dtype: d, peak: gpu.peaks[d].peak_flops.value, ridge: gpu.peaks[d].ridge.value, bw: bw };
    });
    var filled = JSON.parse(JSON.stringify(spec));
    filled.datasets = Object.assign({}, filled.datasets || {}, { ops: drawn, roofs: roofs });
    window.archChart(el, filled).then(function (res) {   // drawn once in view (site.js)
      if (res) el.archView = res.view;   // the drawn data, for readers' tools and the browser tests
    }).catch(function (e) { console.error("chart roofline: " + e); });
    if (note) {
      note.textContent = "";
      var parts = [(gpu.name || String(detail.gpu)) + ":",
        "HBM " + fmt.bytes(bw) + "/s;"];
      roofs.forEach(function (r) { parts.push(r.dtype.toUpperCase() + " peak " + fmt.si(r.peak, "FLOP/s") + ", ridge " + fmt.si(r.ridge) + " FLOP/B;"); });
      parts.push(drawn.length + " ops drawn" + (left ? ", " + left + " without FLOPs or bytes (collectives, no arithmetic intensity) left out." : "."));
      note.textContent = parts.join(" ");
    }
  }
  document.addEventListener("arch:ops", function (e) { draw(e.detail || {}); });
})();
