// Gallery: client-side search, filter and sort over the server-rendered rows; pick two to compare.
(function () {
  "use strict";
  var table = document.getElementById("gallery"), body = table.tBodies[0];
  var q = document.getElementById("q"), fam = document.getElementById("family"), kind = document.getElementById("kind");
  var count = document.getElementById("count"), link = document.getElementById("compare-link");
  var traits = Array.prototype.slice.call(document.querySelectorAll("#traits input[name=trait]"));
  // model rows carry data-name; lineage header rows (tr.lineage) head each lab's group
  function models() { return Array.prototype.filter.call(body.rows, function (r) { return r.hasAttribute("data-name"); }); }
  function apply() {
    var text = q.value.trim().toLowerCase(), n = 0, shown = {};
    var want = traits.filter(function (c) { return c.checked; }).map(function (c) { return c.value; });
    models().forEach(function (row) {
      var has = " " + row.getAttribute("data-traits") + " ";
      var ok = (!text || row.getAttribute("data-search").indexOf(text) >= 0) &&
               (!fam.value || row.getAttribute("data-family") === fam.value) &&
               (!kind.value || row.getAttribute("data-kind") === kind.value) &&
               want.every(function (t) { return has.indexOf(" " + t + " ") >= 0; });
      row.hidden = !ok; if (ok) { n++; shown[row.getAttribute("data-lineage")] = true; }
    });
    Array.prototype.forEach.call(body.querySelectorAll("tr.lineage"), function (h) { h.hidden = !shown[h.getAttribute("data-lineage")]; });
    count.textContent = n + (n === 1 ? " model" : " models");
  }
  [q, fam, kind].concat(traits).forEach(function (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); });
  var release = document.getElementById("release-order");
  var heads = Array.prototype.slice.call(body.querySelectorAll("tr.lineage"));
  if (release) release.addEventListener("click", function () {
    // back to the server's grouping: each lineage header followed by its models in release order
    var rows = models().sort(function (a, b) { return Number(a.getAttribute("data-release")) - Number(b.getAttribute("data-release")); });
    heads.forEach(function (h) {
      body.appendChild(h);
      rows.forEach(function (r) { if (r.getAttribute("data-lineage") === h.getAttribute("data-lineage")) body.appendChild(r); });
    });
    table.classList.remove("sorted");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { if (c.getAttribute("data-sort")) c.setAttribute("aria-sort", "none"); });
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    var key = th.getAttribute("data-sort"); if (!key) return;
    th.querySelector("button").addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending", num = th.getAttribute("data-type") === "num";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { if (c.hasAttribute("aria-sort") || c.getAttribute("data-sort")) c.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var rows = models();
      table.classList.add("sorted");   // a sorted list is flat: the lineage headers step aside
      rows.sort(function (a, b) {
        var x = a.getAttribute("data-" + key), y = b.getAttribute("data-" + key);
        var c = num ? (Number(x) - Number(y)) : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  body.addEventListener("change", function () {
    var picked = Array.prototype.filter.call(body.querySelectorAll(".pick"), function (c) { return c.checked; });
    if (picked.length === 2) {
      link.href = link.getAttribute("href").split("?")[0] + "?a=" + encodeURIComponent(picked[0].value) + "&b=" + encodeURIComponent(picked[1].value);
      link.removeAttribute("aria-disabled");
    } else { link.setAttribute("aria-disabled", "true"); }
  });
  // aria-disabled only looks disabled (CSS stops the pointer, not Enter, which clicks a focused
  // link): the link goes nowhere until two models are ticked
  link.addEventListener("click", function (e) { if (link.getAttribute("aria-disabled") === "true") e.preventDefault(); });
  apply();
})();
