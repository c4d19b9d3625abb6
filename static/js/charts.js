// Static charts: each .chart[data-spec="group.name"] renders the page's spec of that name, once in
// view (site.js archChart loads the chart library then).
(function () {
  "use strict";
  var specs = (window.ARCH_PAGE || {}).specs || {};
  Array.prototype.forEach.call(document.querySelectorAll(".chart[data-spec]"), function (el) {
    // "group.name" or "group.name.panel" (small multiples: a list of specs); a group's "datasets"
    // (rows its specs share, given once) join each spec's own
    var path = el.getAttribute("data-spec").split("."), group = specs[path[0]] || {}, spec = group;
    path.slice(1).forEach(function (k) { spec = spec && spec[k]; });
    if (spec && group.datasets) { spec = Object.assign({}, spec); spec.datasets = Object.assign({}, spec.datasets || {}, group.datasets); }
    if (spec) window.archChart(el, spec)
      .catch(function (e) { console.error("chart " + path.join(".") + ": " + e); });
  });
})();
