// Gallery: client-side search, filter and sort over the server-rendered rows; pick two to compare.
(function () {
  "use strict";
  var table = document.getElementById("gallery"), body = table.tBodies[0];
  var q = document.getElementById("q"), fam = document.getElementById("family"), kind = document.getElementById("kind");
  var count = document.getElementById("count"), link = document.getElementById("compare-link");
  function apply() {
    var text = q.value.trim().toLowerCase(), n = 0;
    Array.prototype.forEach.call(body.rows, function (row) {
      var ok = (!text || row.getAttribute("data-search").indexOf(text) >= 0) &&
               (!fam.value || row.getAttribute("data-family") === fam.value) &&
               (!kind.value || row.getAttribute("data-kind") === kind.value);
      row.hidden = !ok; if (ok) n++;
    });
    count.textContent = n + (n === 1 ? " model" : " models");
  }
  [q, fam, kind].forEach(function (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    var key = th.getAttribute("data-sort"); if (!key) return;
    th.querySelector("button").addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending", num = th.getAttribute("data-type") === "num";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { if (c.hasAttribute("aria-sort") || c.getAttribute("data-sort")) c.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
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
  apply();
})();
