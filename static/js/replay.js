// The replay page: the run as it was after any of its events, rebuilt here from the compact
// event list (webapp/runs/replay_views.py: each event as its live message, plus mutations and
// versions with their times). The rebuild follows the run page's rules (static/js/run.js and
// presenters.graph_state): the DAG shows the latest probe started, coloured by its agents' states.
(function () {
  "use strict";
  const root = document.getElementById("replay");
  if (!root) return;
  const COLORS = { waiting: "#c9cfd8", running: "#e0a526", done: "#2f8f5b", failed: "#c8423b", skipped: "#9aa3ad" };
  const MAX_GAP_S = 2;  // the longest wait between two events during playback, whatever the speed
  const ACCEPTED = new Set(["approved", "promoted", "auto_approved", "adopted"]);
  const $ = (id) => document.getElementById(id);
  let data = null, cy = null, graphKey = null, pos = 0, timer = null;

  // --- the rebuild: state after event index i (0-based) -------------------------------------
  function stateAt(i) {
    const events = data.events.slice(0, i + 1);
    let graph = null, graphIndex = -1;
    events.forEach((e, k) => { if (e.kind === "run_started" && e.data.graph) { graph = e.data.graph; graphIndex = k; } });
    const states = {};
    if (graph) {
      for (const el of graph.elements) if (!el.data.source) states[el.data.id] = "waiting";
      for (const e of events.slice(graphIndex)) {
        if (e.source === graph.source && (e.kind === "agent_started" || e.kind === "agent_finished")) states[e.agent] = e.data.state;
      }
    }
    const points = [];
    let used = null;
    for (const e of events) {
      if (e.kind === "judgement" && e.data.point) points.push(e.data.point);  // incumbent_J: as judged against
      if (e.kind === "model_call" && e.data.used) used = e.data.used;
    }
    const records = events.filter((e) => e.kind === "evidence_recorded" && e.data.record).map((e) => e.data.record);
    const now = events.length ? events[events.length - 1].ts : data.started;
    const versions = data.versions.filter((v) => v.ts != null && v.ts <= now);
    const mutations = data.mutations.filter((m) => m.ts != null && m.ts <= now).map((m) => {
      const decided = m.decided_ts != null && m.decided_ts <= now;
      return { ...m, shown: decided ? m.status : "proposed", shownLabel: decided ? m.status_label : "waiting for a person" };
    });
    // A tree search: its nodes as recorded by then (a node recorded again: the latest wins),
    // retirements, and the champion then (engine/search/tree.py best_unvetoed's rule: best scored, not vetoed).
    const nodes = new Map();
    for (const e of events) {
      if (e.kind === "tree_node") nodes.set(e.data.node, { ...(nodes.get(e.data.node) || {}), ...e.data, id: e.data.node });
      if (e.kind === "node_retired" && nodes.has(e.data.node)) nodes.get(e.data.node).retired = true;
    }
    let champion = null;
    for (const n of nodes.values()) {
      if (n.status !== "scored" || n.vetoed || n.score == null) continue;
      if (!champion || (data.higher_is_better ? n.score > champion.score : n.score < champion.score)) champion = n;
    }
    return { graph, states, points, used, records, versions, mutations, now, events, nodes: [...nodes.values()], champion };
  }

  // --- drawing -------------------------------------------------------------------------------
  // As on the run page: room between layers, and parallel handoffs share one label (one line each).
  function spaced(elements) {
    const groups = {};
    const out = elements.map((e) => {
      const d = { ...e.data };
      if (d.kind === "edge") (groups[d.source + ">" + d.target] ||= []).push(d);
      return e.position ? { data: d, position: { x: e.position.x, y: e.position.y * 1.45 } } : { data: d };
    });
    for (const group of Object.values(groups)) {
      if (group.length < 2) continue;
      group[0].label = group.map((d) => d.label).join("\n");
      for (const d of group.slice(1)) d.label = "";
    }
    return out;
  }

  function drawGraph(graph, states) {
    $("dag-label").textContent = graph ? (graph.source || "") : data.evolves === "program" ? "this search evolves programs: see its tree" : "no probe started yet";
    $("dag").hidden = !graph;  // no empty canvas before the first probe (or ever, for a tree run)
    if (!graph) { if (cy) { cy.destroy(); cy = null; graphKey = null; } $("dag-states").replaceChildren(); return; }
    const key = JSON.stringify(graph.elements.map((e) => [e.data.id, e.data.label]));
    if (!cy || key !== graphKey) {
      graphKey = key;
      if (cy) cy.destroy();
      cy = cytoscape({
        container: $("dag"),
        elements: spaced(graph.elements),
        userZoomingEnabled: true, boxSelectionEnabled: false, autoungrabify: true,
        style: [
          { selector: "node", style: { "shape": "round-rectangle", "width": 132, "height": 46, "label": "data(label)", "text-wrap": "wrap",
              "text-valign": "center", "font-size": 12, "color": "#13202e", "background-color": (n) => COLORS[n.data("state")] || COLORS.waiting,
              "border-width": 2, "border-color": "#3b4656" } },
          { selector: "node[state = 'running']", style: { "border-width": 4, "border-color": "#8a5a00" } },
          { selector: "node[state = 'done'], node[state = 'failed']", style: { "color": "#fff" } },
          { selector: "edge", style: { "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.6, "line-color": "#67758a",
              "target-arrow-color": "#67758a", "label": "data(label)", "font-size": 10, "text-wrap": "wrap",
              "text-background-color": "#fff", "text-background-opacity": 0.85, "color": "#2c3a4c" } },
          { selector: "edge[kind = 'route']", style: { "line-style": "dashed", "line-color": "#b0733a", "target-arrow-color": "#b0733a" } },
        ],
        layout: { name: "preset", fit: true, padding: 28 },
      });
    }
    const list = $("dag-states");
    list.replaceChildren();
    for (const [agent, state] of Object.entries(states)) {
      const node = cy.getElementById(agent);
      if (node && node.length) node.data("state", state);
      const li = document.createElement("li");
      li.id = "state-" + agent; li.dataset.state = state; li.textContent = agent + ": " + state;
      list.appendChild(li);
    }
  }

  function drawScores(points, used) {
    const x = points.map((p) => p.iteration);
    const traces = [
      { x, y: points.map((p) => p.J), name: "J", mode: "lines+markers", line: { width: 3, color: "#1d2430" } },
      { x, y: points.map((p) => p.incumbent_J), name: "incumbent J", mode: "lines", line: { dash: "dot", color: "#2f8f5b" } },
    ];
    // the validation metric on its own axis, once some probe has one (its scale is the task's)
    const hasValidation = points.some((p) => p.validation != null);
    if (hasValidation) traces.push({ x, y: points.map((p) => p.validation), name: "validation " + (data.metric || ""), yaxis: "y2", mode: "markers", marker: { size: 8, color: "#6b5bd6" } });
    const maxIt = Math.max(4, ...data.events.filter((e) => e.kind === "judgement" && e.data.point).map((e) => e.data.point.iteration));
    Plotly.react("chart-j", traces, {
      margin: { l: 44, r: 54, t: 14, b: 60 }, height: 260, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
      xaxis: { title: { text: "iteration" }, range: [-0.5, maxIt + 0.5], dtick: 1 }, yaxis: { title: { text: "J" }, range: [0, 1.02] },
      ...(hasValidation ? { yaxis2: { overlaying: "y", side: "right", title: { text: data.metric || "validation" } } } : {}),
      legend: { orientation: "h", x: 0, y: -0.3, font: { size: 10 } },
    }, { displayModeBar: false, responsive: true });
    $("budget").textContent = used ? used.tokens + " tokens · " + used.calls + " calls" : "";
  }

  function fill(list, items, render, empty = true) {
    list.replaceChildren();
    for (const item of items) { const li = document.createElement("li"); render(li, item); list.appendChild(li); }
    if (!items.length && empty) { const li = document.createElement("li"); li.className = "muted"; li.textContent = "none yet"; list.appendChild(li); }
  }

  function describe(e) {
    const d = e.data || {};
    let text = "#" + e.seq + " · it " + e.iteration + " · " + e.kind.replace(/_/g, " ");
    if (e.agent) text += " · " + e.agent;
    if (e.kind === "agent_finished") text += " · " + d.status;
    if (e.kind === "judgement" && d.point && d.point.J != null) text += " · J " + d.point.J.toFixed(3);
    if (e.kind === "search_iteration" && d.accepted != null) text += d.accepted ? " · accepted" : " · not accepted";
    return text;
  }

  function show(i) {
    pos = Math.max(0, Math.min(i, data.events.length - 1));
    $("replay-slider").value = pos;
    const s = stateAt(pos);
    const ev = data.events[pos];
    const t = ev ? new Date(ev.ts * 1000) : null;
    $("replay-pos").textContent = ev ? "event " + ev.seq + " of " + data.events[data.events.length - 1].seq + " · " +
      t.toLocaleTimeString() + " · +" + (ev.ts - data.started).toFixed(1) + " s" : "no events";
    root.dataset.seq = ev ? ev.seq : 0;
    drawGraph(s.graph, s.states);
    drawScores(s.points, s.used);
    fill($("replay-queue"), s.mutations.slice().reverse(), (li, m) => {
      li.className = m.shown === "proposed" ? "m-pending" : ACCEPTED.has(m.shown) ? "m-accepted" : "m-rejected";
      li.dataset.status = m.shown;
      li.textContent = "it " + m.iteration + " · " + m.kind + (m.target ? " " + m.target : "") + " · " + m.shownLabel +
        (m.shown !== "proposed" && m.decided_by ? " by " + m.decided_by : "") + (m.J != null ? " · J " + Number(m.J).toFixed(3) : "");
      li.title = m.rationale + (m.reason ? "\n" + m.reason : "");
    });
    fill($("replay-versions"), s.versions, (li, v) => {
      li.textContent = "v" + v.number + " · " + v.author + " · it " + v.iteration + (v.note ? " · " + v.note : "");
    });
    const kinds = {};
    for (const r of s.records) kinds[r.kind] = (kinds[r.kind] || 0) + 1;
    $("replay-ev-count").textContent = s.records.length + " records";
    fill($("replay-ev-kinds"), Object.entries(kinds), (li, [k, n]) => { li.textContent = k + ": " + n; }, false);
    fill($("replay-evidence"), s.records.slice(-12).reverse(), (li, r) => {
      li.textContent = "#" + r.id + " " + r.kind + " · " + (r.author_label || "") + " · " + (r.preview || r.text || "");
    });
    $("replay-tree-card").hidden = !data.events.some((e) => e.kind === "tree_node");
    $("replay-champion").textContent = s.champion ? "champion then: " + s.champion.id + " · " + s.champion.score.toPrecision(4) : "";
    fill($("replay-tree"), s.nodes.slice().reverse(), (li, n) => {
      li.id = "tree-node-" + n.id; li.dataset.status = n.status;
      li.textContent = n.id + (n.parent ? " ← " + n.parent : " (root)") + " · it " + n.iteration + " · " +
        (n.score != null ? data.metric + " " + n.score.toPrecision(4) : n.status) + (n.retired ? " · retired" : "") +
        (n.vetoed ? " · vetoed" : "") + (s.champion && s.champion.id === n.id ? " · champion" : "");
    });
    fill($("activity"), s.events.slice(-14).reverse(), (li, e) => {
      li.textContent = describe(e); li.className = "a-" + e.kind;
      if (e === ev) li.classList.add("now");
    });
  }

  // --- playback ------------------------------------------------------------------------------
  let shortened = 0;
  function stop() { clearTimeout(timer); timer = null; $("replay-play").textContent = "▶ Play"; $("replay-play").setAttribute("aria-label", "Play"); }
  function step() {
    if (pos >= data.events.length - 1) { stop(); return; }
    const speed = Number($("replay-speed").value) || 1;
    const gap = (data.events[pos + 1].ts - data.events[pos].ts) / speed;
    if (gap > MAX_GAP_S) { shortened += 1; $("replay-gaps").textContent = shortened; }
    timer = setTimeout(() => { show(pos + 1); step(); }, Math.max(0, Math.min(gap, MAX_GAP_S)) * 1000);
  }
  function play() {
    if (timer) { stop(); return; }
    if (pos >= data.events.length - 1) show(0);
    $("replay-play").textContent = "❚❚ Pause"; $("replay-play").setAttribute("aria-label", "Pause");
    step();
  }

  // A run still going: its newer events are fetched every few seconds; a slider at the end follows them.
  const ACTIVE = new Set(["queued", "running", "awaiting_decision", "pausing", "cancelling"]);
  function follow() {
    if (!ACTIVE.has(data.status)) return;
    setTimeout(() => trellisJSON(root.dataset.json).then((d) => {
      const atEnd = pos >= data.events.length - 1 && !timer;
      data = d;
      $("replay-slider").max = Math.max(0, d.events.length - 1);
      show(atEnd ? d.events.length - 1 : pos);
      follow();
    }).catch(follow), 5000);
  }

  trellisJSON(root.dataset.json).then((d) => {
    data = d;
    const slider = $("replay-slider");
    slider.max = Math.max(0, d.events.length - 1);
    slider.addEventListener("input", () => { stop(); show(Number(slider.value)); });
    $("replay-play").addEventListener("click", play);
    $("replay-prev").addEventListener("click", () => { stop(); show(pos - 1); });
    $("replay-next").addEventListener("click", () => { stop(); show(pos + 1); });
    const wanted = Number(new URLSearchParams(location.search).get("seq"));
    const at = wanted ? d.events.findIndex((e) => e.seq >= wanted) : d.events.length - 1;
    show(at < 0 ? d.events.length - 1 : at);
    root.dataset.ready = "1";
    follow();
  }).catch((err) => { root.dataset.error = err.message; root.prepend(Object.assign(document.createElement("p"),
    { className: "error", textContent: "The run's events could not be loaded (" + err.message + "); reload the page to try again." })); });
  window.trellisReplay = { stateAt: (i) => stateAt(i), show: (i) => show(i) };
})();
