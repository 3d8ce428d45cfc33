// The final workflow's predictions beside the held-out truth (webapp/runs/predictions_plot.py):
// prediction vs truth with the y = x line, and the residuals against the truth (or the task's one
// input, where it has one). Loaded once the run has made its final commitment; reloaded when the
// run's status changes (a control's htmx swap of the header, or a pushed status message).
(function () {
  const card = document.getElementById("predictions-card");
  if (!card) return;
  const plotOptions = { displayModeBar: false, responsive: true };
  const layout = (title, x, y) => ({ title: { text: title, font: { size: 13 }, x: 0.02 }, height: 300,
    margin: { l: 56, r: 16, t: 34, b: 48 }, xaxis: { title: { text: x } }, yaxis: { title: { text: y } },
    showlegend: false, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff" });
  let drawn = false;

  function say(text) { card.querySelector(".predictions-note").textContent = text; }

  function drawValues(d) {
    const truth = d.points.map((p) => p.truth), pred = d.points.map((p) => p.prediction);
    const ids = d.points.map((p) => "id " + p.id);
    const lo = Math.min(...truth, ...pred), hi = Math.max(...truth, ...pred);
    Plotly.react(card.querySelector(".chart-pvt"), [
      { x: truth, y: pred, text: ids, mode: "markers", type: "scatter", marker: { size: 5, color: "#2b6cb0", opacity: 0.7 } },
      { x: [lo, hi], y: [lo, hi], mode: "lines", line: { dash: "dot", color: "#5b6575" }, hoverinfo: "skip" },
    ], layout("Prediction vs truth (held out)", "truth", "prediction"), plotOptions);
    const feature = d.features.length === 1 ? d.features[0] : null;
    const xs = feature ? d.points.map((p) => Number(p.x[0])) : truth;
    Plotly.react(card.querySelector(".chart-residuals"), [
      { x: xs, y: d.points.map((p) => p.residual), text: ids, mode: "markers", type: "scatter", marker: { size: 5, color: "#c05621", opacity: 0.7 } },
      { x: [Math.min(...xs), Math.max(...xs)], y: [0, 0], mode: "lines", line: { dash: "dot", color: "#5b6575" }, hoverinfo: "skip" },
    ], layout("Residuals (prediction − truth)", feature || "truth", "residual"), plotOptions);
    say(`${d.n} held-out rows${d.shown < d.n ? `, ${d.shown} drawn` : ""}${d.unmatched ? `; ${d.unmatched} with no prediction` : ""}.`);
  }

  function drawClasses(d) {
    const truths = [...new Set(d.cells.map((c) => c.truth))], preds = [...new Set(d.cells.map((c) => c.prediction))];
    const z = truths.map((t) => preds.map((p) => (d.cells.find((c) => c.truth === t && c.prediction === p) || { count: 0 }).count));
    Plotly.react(card.querySelector(".chart-pvt"), [{ type: "heatmap", x: preds, y: truths, z, colorscale: "Blues", showscale: false,
      text: z.map((r) => r.map(String)), texttemplate: "%{text}" }], layout("Predicted vs true class (held out)", "predicted", "true"), plotOptions);
    card.querySelector(".chart-residuals").hidden = true;
    say(`${d.n} held-out rows${d.unmatched ? `; ${d.unmatched} with no prediction` : ""}.`);
  }

  function load() {
    if (drawn) return;
    trellisJSON(card.dataset.url).then((d) => {
      if (d.missing) { say(d.missing); return; }
      drawn = true;
      card.querySelector(".charts").hidden = false;
      (d.kind === "classes" ? drawClasses : drawValues)(d);
    }).catch(() => say("The held-out comparison could not be loaded; it is tried again when the run's status changes."));
  }
  window.addEventListener("load", load);
  document.body.addEventListener("htmx:afterSettle", (e) => { if (e.target.closest && e.target.closest("#run-header")) load(); });
  // a run watched live ends by a pushed message (run.js swaps the header itself, no htmx event)
  document.addEventListener("trellis:message", (e) => { if (e.detail && e.detail.kind === "status") load(); });
  document.addEventListener("trellis:reconnected", load);
})();
