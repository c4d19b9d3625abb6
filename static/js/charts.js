// Static charts: each .chart[data-spec="group.name"] renders the page's spec of that name, once in
// view (site.js archChart loads the chart library then).
(function () {
  "use strict";
  var specs = (window.ARCH_PAGE || {}).specs || {};
  Array.prototype.forEach.call(document.querySelectorAll(".chart[data-spec]"), function (el) {
    var path = el.getAttribute("data-spec").split("."), spec = specs[path[0]] && specs[path[0]][path[1]];
    if (spec) window.archChart(el, spec)
      .catch(function (e) { console.error("chart " + path.join(".") + ": " + e); });
  });
})();
