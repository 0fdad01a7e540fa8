// The xlgraph report page: sortable and filterable tables, and an operation's steps
// highlighted on the liveness chart when its row is clicked (and the reverse).
(function () {
  "use strict";

  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    return numeric ? parseFloat(cell.getAttribute("data-value")) : cell.textContent;
  }

  function sortBy(table, th) {
    var index = th.cellIndex;
    var numeric = th.getAttribute("data-numeric") === "1";
    // numbers sort largest first on the first click, text A to Z; a second click reverses
    var first = numeric ? "desc" : "asc";
    var order = th.classList.contains("sorted-" + first) ? (first === "desc" ? "asc" : "desc")
                                                          : first;
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) {
      heads[i].classList.remove("sorted-asc", "sorted-desc");
    }
    th.classList.add("sorted-" + order);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = order === "asc" ? 1 : -1;
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      if (numeric) { return sign * (x - y); }
      return sign * x.localeCompare(y);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  function filterRows(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    var text = input.value.toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      row.style.display = row.textContent.toLowerCase().indexOf(text) >= 0 ? "" : "none";
    });
  }

  function positionsOf(row) {
    var text = row.getAttribute("data-positions") || "";
    return text ? text.split(",").map(Number) : [];
  }

  function highlight(row) {
    var chart = document.getElementById("liveness");
    var table = row.closest("table");
    Array.prototype.forEach.call(table.querySelectorAll("tr.selected"), function (other) {
      other.classList.remove("selected");
    });
    row.classList.add("selected");
    if (!chart || !window.Plotly) { return; }
    var shapes = positionsOf(row).map(function (p) {
      return {type: "rect", xref: "x", yref: "paper", x0: p - 0.5, x1: p + 0.5, y0: 0, y1: 1,
              fillcolor: "rgba(255, 160, 0, 0.35)", line: {color: "#ff8c00", width: 1},
              name: "step " + p};
    });
    chart.setAttribute("data-highlighted", positionsOf(row).join(","));
    window.Plotly.relayout(chart, {shapes: shapes});
  }

  function selectStep(position) {
    var rows = document.querySelectorAll("#ops-table tr.op-row");
    for (var i = 0; i < rows.length; i++) {
      if (positionsOf(rows[i]).indexOf(position) >= 0) {
        highlight(rows[i]);
        rows[i].scrollIntoView({block: "nearest"});
        return;
      }
    }
  }

  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th.closest("table"), th); });
  });
  document.querySelectorAll("input.filter").forEach(function (input) {
    input.addEventListener("input", function () { filterRows(input); });
  });
  document.querySelectorAll("tr.op-row").forEach(function (row) {
    row.addEventListener("click", function () { highlight(row); });
  });
  var chart = document.getElementById("liveness");
  if (chart && chart.on) {
    chart.on("plotly_click", function (event) {
      if (event.points.length) { selectStep(event.points[0].x); }
    });
  }
})();
