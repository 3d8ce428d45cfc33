// The search card: what the run's search did, as it presents itself (engine/search/presentation.py).
// The server renders the panels (templates/runs/_search.html); charts are drawn here from their
// JSON, and the card is fetched again when an event of a kind the search presents arrives.
(function () {
  const box = document.getElementById("search-panels");
  if (!box) return;
  const kinds = new Set((box.dataset.kinds || "").split(",").filter(Boolean));
  const COLORS = ["#1d2430", "#2f8f5b", "#6b5bd6", "#c8423b", "#d08a1c", "#2b7bb9", "#8a5a44"];

  function draw() {
    if (typeof Plotly === "undefined") { setTimeout(draw, 200); return; }
    for (const el of box.querySelectorAll(".search-chart")) {
      const spec = JSON.parse(el.nextElementSibling.textContent);
      const traces = spec.lines.map((l, i) => ({
        x: l.x, y: l.y, name: l.name, mode: l.mode, connectgaps: false,
        line: { dash: l.dash, shape: l.shape, color: COLORS[i % COLORS.length], width: i === 0 ? 2.5 : 1.8 },
        marker: { size: 8, color: COLORS[i % COLORS.length] },
      }));
      // the legend above the plot (below it, a long one ran over the cards under the chart), and
      // the box as tall as the figure, so nothing after it is drawn over
      const legendRows = Math.ceil(traces.length / 3), height = 250 + 18 * legendRows;
      el.style.height = height + "px";
      Plotly.react(el, traces, {
        margin: { l: 52, r: 16, t: 8 + 18 * legendRows, b: 40 }, height,
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
        xaxis: { title: { text: spec.x_title, standoff: 4 }, dtick: 1 }, yaxis: { title: { text: spec.y_title } },
        legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: { size: 10 } },
      }, { displayModeBar: false, responsive: true });
    }
  }
  let due = null;
  function refresh() {
    if (due) return;
    due = setTimeout(() => { due = null; htmx.ajax("GET", box.getAttribute("hx-get"), { target: box, swap: "innerHTML" }); }, 1200);
  }
  // after the settle: htmx then resets the class of an element whose id the old content had too
  document.body.addEventListener("htmx:afterSettle", (e) => { if (e.detail.target === box) draw(); });
  document.addEventListener("trellis:message", (e) => { if (kinds.has(e.detail.kind)) refresh(); });
  document.addEventListener("trellis:reconnected", refresh);
})();
