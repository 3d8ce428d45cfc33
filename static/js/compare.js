// The compare page's chart: each run's J per probe and its incumbent, overlaid on one axis
// (J is on [0, 1] for every task, so runs of different tasks share it).
(function () {
  "use strict";
  const el = document.getElementById("compare-series");
  if (!el) return;
  const series = JSON.parse(el.textContent);
  const PALETTE = ["#1d5fa8", "#c8423b", "#2f8f5b", "#8a5a00", "#6b5bd6", "#0f7b8a"];
  const traces = [];
  series.forEach((s, k) => {
    const color = PALETTE[k % PALETTE.length];
    traces.push({ x: s.iteration, y: s.J, name: s.label + " · J", mode: "lines+markers", line: { color, width: 2.5 }, legendgroup: String(s.run) });
    traces.push({ x: s.iteration, y: s.incumbent_J, name: s.label + " · incumbent", mode: "lines", line: { color, dash: "dot" }, legendgroup: String(s.run) });
  });
  Plotly.newPlot("compare-chart", traces, {
    height: 340, margin: { l: 48, r: 20, t: 14, b: 90 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
    xaxis: { title: { text: "iteration" }, dtick: 1 }, yaxis: { title: { text: "J" }, range: [0, 1.02] },
    legend: { orientation: "h", x: 0, y: -0.25, font: { size: 10 } },
  }, { displayModeBar: false, responsive: true });
  document.getElementById("compare").dataset.ready = "1";
})();
