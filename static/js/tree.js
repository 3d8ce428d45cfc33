// The tree card of a tree-search run: the tree of candidate programs (cytoscape), why each
// iteration expanded the parents it did, and every node's score by iteration (plotly).
// It loads tree.json once, then follows the events run.js re-dispatches from its WebSocket
// ("trellis:message"), each of which carries the tree as the search folds it (TreeSearch.state,
// webapp/runs/search_state.py).
(function () {
  "use strict";
  const card = document.getElementById("tree-card");
  if (!card) return;
  const $ = (id) => document.getElementById(id);

  let state = null;        // tree.json, kept up to date by pushed events
  let cy = null;

  const fmt = (v) => (v == null ? "no score" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : (+v.toPrecision(4)).toString());
  const champion = () => state.champion;
  const better = (a, b) => (state.higher_is_better ? a > b : a < b);
  function nodeById(id) { return state.nodes.find((n) => n.id === id); }

  // --- words --------------------------------------------------------------------------------
  function decision(n) {
    if (n.parent == null) return "written from the data analyst's report";
    if (n.vetoed) return "vetoed by " + (n.decided_by || "a person");
    if (n.status !== "scored") return "never ran cleanly: nothing to decide";
    if (!n.decided_by) return "not decided yet";
    return (n.promoted ? "approved and promoted by " : "approved by ") + n.decided_by;
  }

  function marks(n, champ) {
    const out = [];
    if (n.id === champ) out.push("★ champion");
    if (n.status === "failed") out.push("failed");
    if (n.vetoed) out.push("✕ vetoed");
    if (n.promoted) out.push("▲ promoted");
    if (n.retired) out.push("retired");
    return out;
  }

  // A blend names its parts ("ridge + svr"): that, not its nested parameters, is what tells it apart.
  function strategyName(n) {
    const parts = n.strategy === "blend" && Array.isArray((n.params || {}).parts) ? n.params.parts : null;
    return parts ? "blend of " + parts.map((p) => p[0]).join(" + ") : (n.strategy || "");
  }

  function describe(n, champ) {
    const blend = n.strategy === "blend";
    const params = !blend && Object.keys(n.params || {}).length ? " " + JSON.stringify(n.params) : "";
    const parts = [n.id + ": " + (strategyName(n) || "unknown strategy") + params, n.score == null ? "no score" : state.metric_label + " " + fmt(n.score),
                   n.parent ? "child of " + n.parent + " in iteration " + n.iteration : "root", decision(n)];
    const kids = state.nodes.filter((c) => c.parent === n.id).length;
    if (kids) parts.push(kids + (state.max_children ? "/" + state.max_children : "") + " children");
    if (n.retired) parts.push("retired in iteration " + n.retired_at);
    if (n.id === champ) parts.push("the champion");
    return parts.join(" · ");
  }

  // --- drawing ------------------------------------------------------------------------------
  function label(n, champ) {
    const m = marks(n, champ).filter((w) => w !== "failed");
    // Three short lines rather than one long one: a narrow node leaves the tree room to stay legible.
    return n.id + " · " + (n.status === "failed" ? "failed" : fmt(n.score)) + "\n" + (strategyName(n) || "?") + (m.length ? "\n" + m.join(" ") : "");
  }

  function classesOf(n, champ) {
    return [n.status === "scored" ? "scored" : "failed", n.vetoed && "vetoed", n.retired && "retired",
            n.promoted && "promoted", n.id === champ && "champion"].filter(Boolean).join(" ");
  }

  const STYLE = [
    { selector: "node", style: {
        "shape": "round-rectangle", "width": "data(w)", "height": 58, "label": "data(label)", "text-wrap": "wrap",
        "text-max-width": 400, "text-valign": "center", "font-size": 13, "line-height": 1.25, "color": "#13202e",
        "background-color": "#dcf2e3", "border-width": 2, "border-color": "#2f8f5b" } },
    { selector: "node.failed", style: { "background-color": "#fbdcd9", "border-color": "#c8423b", "color": "#6e1d18" } },
    { selector: "node.retired", style: { "background-opacity": 0, "color": "#5b6575", "border-opacity": 0.7 } },
    { selector: "node.promoted", style: { "border-color": "#2b5fb3", "border-width": 4 } },
    { selector: "node.vetoed", style: { "background-color": "#ececec", "background-opacity": 1, "border-color": "#7a7f87",
        "border-style": "dashed", "border-width": 2, "color": "#5f646b" } },
    { selector: "node.champion", style: { "border-color": "#b07d00", "border-width": 5, "underlay-color": "#f2c14e",
        "underlay-opacity": 0.6, "underlay-padding": 7, "underlay-shape": "round-rectangle", "font-weight": "bold" } },
    { selector: "edge", style: { "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.6,
        "line-color": "#8793a4", "target-arrow-color": "#8793a4" } },
    { selector: "edge.to-vetoed", style: { "line-style": "dashed", "line-color": "#b4b9c0", "target-arrow-color": "#b4b9c0" } },
  ];

  function depth(n, seen = 0) {
    const p = n.parent && nodeById(n.parent);
    return p && seen < 500 ? 1 + depth(p, seen + 1) : 0;
  }

  // Preorder rank of every node (children in arrival order): sorting each layer by it keeps
  // siblings together under their parent, so no two edges cross.
  function preorder(ids) {
    const kids = {}, rank = {};
    for (const n of state.nodes) if (n.parent && ids.has(n.parent)) (kids[n.parent] ||= []).push(n.id);
    const visit = (id) => { if (id in rank) return; rank[id] = Object.keys(rank).length; for (const k of kids[id] || []) visit(k); };
    for (const n of state.nodes) if (!n.parent || !ids.has(n.parent)) visit(n.id);
    return rank;
  }

  function drawTree(champ) {
    const box = $("tree-graph");
    const ids = new Set(state.nodes.map((n) => n.id));
    const levels = state.nodes.reduce((m, n) => Math.max(m, depth(n)), 0) + 1;
    box.style.height = Math.min(620, Math.max(220, levels * 90 + 30)) + "px";
    if (!cy) {
      cy = cytoscape({ container: box, style: STYLE, elements: [], userZoomingEnabled: true, boxSelectionEnabled: false,
                       autoungrabify: true, minZoom: 0.2, maxZoom: 2 });
      cy.on("mouseover tap", "node", (e) => showTip(e.target));
      cy.on("tap", "node", (e) => document.dispatchEvent(new CustomEvent("trellis:node", { detail: e.target.id() })));  // training.js
      cy.on("mouseout", "node", hideTip);
      cy.on("tap", (e) => { if (e.target === cy) hideTip(); });
    }
    let added = false;  // a changed set of nodes is laid out again
    cy.batch(() => {
      // A reload after a reconnect may know fewer nodes (a run restarted from its checkpoint).
      const gone = cy.elements().filter((el) => (el.isNode() ? !ids.has(el.id()) : !ids.has(el.data("target"))));
      if (gone.length) { gone.remove(); added = true; }
      for (const n of state.nodes) {
        const text = label(n, champ);
        // Wide enough for its longest line (about 7.3 px a character at 13 px), so no label wraps.
        const data = { id: n.id, label: text, w: Math.max(90, 14 + 7.3 * Math.max(...text.split("\n").map((l) => l.length))) };
        let el = cy.getElementById(n.id);
        if (!el.length) { el = cy.add({ group: "nodes", data }); added = true; } else el.data(data);
        el.classes(classesOf(n, champ));
      }
      for (const n of state.nodes) {
        if (!n.parent || !ids.has(n.parent)) continue;
        const id = n.parent + ">" + n.id;
        let e = cy.getElementById(id);
        if (!e.length) { e = cy.add({ group: "edges", data: { id, source: n.parent, target: n.id } }); added = true; }
        e.classes(n.vetoed ? "to-vetoed" : "");
      }
    });
    if (added) {
      hideTip();  // the nodes move: a tip would point at the wrong one
      cy.resize();
      const roots = state.nodes.filter((n) => !n.parent || !ids.has(n.parent)).map((n) => "#" + CSS.escape(n.id));
      const rank = preorder(ids);
      cy.layout({ name: "breadthfirst", directed: true, roots: roots.join(","), spacingFactor: 1.0, padding: 16,
                  depthSort: (a, b) => rank[a.id()] - rank[b.id()],
                  fit: true, animate: false, avoidOverlap: true }).run();
      if (cy.zoom() > 1.2) { cy.zoom(1.2); cy.center(); }
    }
  }

  function showTip(el) {
    const n = nodeById(el.id());
    if (!n) return;
    const tip = $("tree-tip");
    tip.textContent = describe(n, champion()).split(" · ").join("\n");
    tip.hidden = false;
    // Beside the node, on whichever side keeps the tip inside the drawing.
    const p = el.renderedPosition(), box = $("tree-graph"), half = el.renderedOuterWidth() / 2 + 8;
    const left = p.x + half + tip.offsetWidth < box.clientWidth ? p.x + half : p.x - half - tip.offsetWidth;
    tip.style.left = Math.max(4, left) + "px";
    tip.style.top = Math.max(4, Math.min(p.y - 20, box.clientHeight - tip.offsetHeight - 4)) + "px";
  }
  function hideTip() { $("tree-tip").hidden = true; }

  function listIterations() {
    const ol = $("tree-iterations");
    ol.replaceChildren();
    if (!state.iterations.length) {
      const li = document.createElement("li"); li.className = "muted"; li.textContent = "No iteration has started yet.";
      ol.appendChild(li); return;
    }
    for (const it of state.iterations) {
      const li = document.createElement("li");
      const head = document.createElement("strong"); head.textContent = "Iteration " + it.n;
      li.append(head, " · expanded ");
      it.parents.forEach((p, i) => {
        if (i) li.append(", ");
        const b = document.createElement("b"); b.textContent = p.id;
        const why = document.createElement("span"); why.className = "why why-" + p.reason; why.textContent = p.label;
        li.append(b, " (", why, ")");
      });
      const kids = state.nodes.filter((n) => n.iteration === it.n && n.parent);
      li.append(kids.length ? " → " + kids.map((n) => n.id + (n.status === "failed" ? " failed" : " " + fmt(n.score)) + (n.vetoed ? " vetoed" : "")).join(", ")
                            : " → no child yet");
      for (const a of it.abandoned) li.append(" · a child of " + a.parent + " was abandoned: " + a.error);
      ol.appendChild(li);
    }
  }

  function listNodes(champ) {
    const ol = $("tree-nodes");
    ol.replaceChildren(...state.nodes.map((n) => {
      const li = document.createElement("li"); li.textContent = describe(n, champ); li.className = classesOf(n, champ); return li;
    }));
  }

  function summary(champ) {
    const c = champ && nodeById(champ);
    const parts = [state.nodes.length + (state.nodes.length === 1 ? " node" : " nodes")];
    parts.push(c ? "champion " + c.id + " (" + (strategyName(c) || "?") + ", " + fmt(c.score) + ")" : "no champion yet");
    parts.push(state.metric_label + ", " + state.direction);
    if (state.finished) parts.push("finished: " + state.finished.stopped);
    $("tree-summary").textContent = parts.join(" · ");
    $("tree-bundle").hidden = !state.bundle;  // written after the official evaluation (engine/bundle/)
  }

  function drawChart(champ) {
    const byIt = {};
    for (const n of state.nodes) (byIt[n.iteration] ||= []).push(n);
    const x = (n) => { const g = byIt[n.iteration]; const k = g.indexOf(n); return n.iteration + (g.length > 1 ? Math.max(-0.3, Math.min(0.3, (k - (g.length - 1) / 2) * 0.12)) : 0); };
    const hover = (n) => n.id + " · " + (n.strategy || "?") + "<br>" + fmt(n.score) + " · " + decision(n);
    const trace = (nodes, name, marker, extra = {}) => ({ x: nodes.map(x), y: nodes.map((n) => n.score), text: nodes.map(hover),
      hoverinfo: "text", mode: "markers", type: "scatter", name, marker, ...extra });
    const scored = state.nodes.filter((n) => n.status === "scored" && n.score != null);
    const plain = scored.filter((n) => !n.vetoed && n.id !== champ);
    const vetoed = scored.filter((n) => n.vetoed);
    const failed = state.nodes.filter((n) => n.status !== "scored" || n.score == null);
    const last = state.nodes.reduce((m, n) => Math.max(m, n.iteration), 0);
    const bx = [], by = [];
    let best = null;
    for (let i = 0; i <= last; i++) {
      for (const n of byIt[i] || []) if (n.status === "scored" && !n.vetoed && n.score != null && (best == null || better(n.score, best))) best = n.score;
      if (best != null) { bx.push(i); by.push(best); }
    }
    const traces = [
      { x: bx, y: by, name: "best so far", mode: "lines", line: { shape: "hv", width: 2.5, color: "#1d2430" }, hoverinfo: "skip" },
      trace(plain, "node", { size: 9, color: "#2f8f5b", line: { width: 1, color: "#fff" } }),
      trace(vetoed, "vetoed", { size: 11, symbol: "circle-x-open", color: "#7a7f87", line: { width: 2 } }),
      // Failed nodes have no score: they sit on a strip of their own under the scores.
      trace(failed, "failed (no score)", { size: 10, symbol: "x", color: "#c8423b" }, { y: failed.map(() => 0.5), yaxis: "y2" }),
    ];
    const c = champ && nodeById(champ);
    if (c) traces.push(trace([c], "champion", { size: 17, symbol: "star", color: "#f2c14e", line: { width: 1.5, color: "#8a6200" } }));
    const ytitle = state.metric_label + " (" + state.direction + ")";
    const layout = { title: { text: "Node scores by iteration (in-loop validation)", font: { size: 13 }, x: 0.02 },
      margin: { l: 56, r: 16, t: 34, b: 70 }, height: 300, hovermode: "closest",
      xaxis: { title: { text: "iteration", standoff: 4 }, dtick: 1, range: [-0.5, Math.max(last, 1) + 0.5], zeroline: false,
               anchor: failed.length ? "y2" : "y" },
      yaxis: { title: { text: ytitle }, zeroline: false, domain: failed.length ? [0.2, 1] : [0, 1] },
      yaxis2: { domain: [0, 0.1], range: [0, 1], fixedrange: true, visible: failed.length > 0, showgrid: false, zeroline: false,
                tickvals: [0.5], ticktext: ["failed"], tickfont: { color: "#c8423b" } },
      legend: { orientation: "h", x: 0, y: -0.25, yanchor: "top", font: { size: 11 } },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff" };
    if (!scored.length) layout.annotations = [{ text: "no node scored yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { color: "#5b6575" } }];
    Plotly.react("tree-chart", traces, layout, { displayModeBar: false, responsive: true });
  }

  let queued = false;
  function render() {  // at most once a frame, however many events arrive together
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      const champ = champion();
      state.metric_label = state.metric || "score";
      state.direction = state.higher_is_better ? "higher is better" : "lower is better";
      summary(champ); listIterations(); listNodes(champ);
      if (window.cytoscape) drawTree(champ);
      if (window.Plotly) drawChart(champ);
    });
  }

  // --- loading and live updates ---------------------------------------------------------------
  // Every tree event's message carries the whole tree as the search folds it (webapp/runs/live.py,
  // search_state.py, TreeSearch.state): the page only draws it, so no rule for reading events lives here.
  function show(tree) {
    if (state && tree.seq < state.seq) return;  // an older picture than the one drawn
    state = tree;
    render();
  }

  function load() {
    return fetch(card.dataset.tree, { headers: { Accept: "application/json" } })
      .then((r) => { if (!r.ok) throw new Error("tree.json " + r.status); return r.json(); })
      .then(show)
      .catch((err) => { $("tree-summary").textContent = "could not load the tree (" + err.message + ")"; });
  }

  document.addEventListener("trellis:message", (e) => {
    const tree = ((e.detail || {}).data || {}).state;
    if (tree) show(tree);
    // the champion bundle is written after the last tree event: a finished run reads the tree again
    else if ((e.detail || {}).kind === "status" && e.detail.status === "completed") load();
  });
  document.addEventListener("trellis:reconnected", () => { load(); });
  load();
})();
