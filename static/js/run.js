// The run page: one WebSocket per page. Each message carries its data (webapp/runs/live.py):
// an agent's state, a new probe's graph, a score point, or fragments rendered for this viewer
// (header, queue entry, versions, editor). A frame is one message or, when they come fast, an
// array of them (webapp/runs/fanout.py). The page applies them in their order and is never
// silently stale: one it missed (or sent while its socket was down) it fetches, saying
// "catching up…" meanwhile (see "the live feed" below). Other panels (tree.js, evidence.js,
// training.js, annotate.js) get every message as "trellis:message" and reload themselves on
// "trellis:reconnected".
(function () {
  "use strict";
  const root = document.getElementById("run");
  if (!root) return;
  const COLORS = { waiting: "#c9cfd8", running: "#e0a526", done: "#2f8f5b", failed: "#c8423b", skipped: "#9aa3ad" };
  let cy = null;
  let graphSource = null;   // the engine run id whose agents the graph shows
  let graphKey = null;      // which workflow is drawn, to redraw only when it changes

  const debounce = (fn, ms) => { let t = null; return () => { clearTimeout(t); t = setTimeout(fn, ms); }; };

  // What the graph shows, and which version is the run's latest, so that a decision or an
  // edit shows up here even while the next probe runs a candidate.
  function graphLabel(data) {
    const label = data.label || "";
    if (!data.version || label.includes("v" + data.version + " ") || label.endsWith("v" + data.version)) return label;
    return label + " · latest version v" + data.version;
  }

  // Room between layers for the contracts; parallel handoffs share one label (one line each)
  // instead of drawing their labels on top of each other; an edge that bows past a layer
  // carries its label outside the bow, clear of the node it passes.
  function spaced(elements) {
    const groups = {};
    const out = elements.map((e) => {
      const d = { ...e.data };
      if (d.kind === "edge") (groups[d.source + ">" + d.target] ||= []).push(d);
      if (d.bow) { d.bow = d.bow * 2; d.shift = (d.bow > 0 ? -1 : 1) * (d.label.length * 2.6 + 8); }
      return e.position ? { data: d, position: { x: e.position.x, y: e.position.y * 1.45 } } : { data: d };
    });
    for (const group of Object.values(groups)) {
      if (group.length < 2) continue;
      group[0].label = group.map((d) => d.label).join("\n");
      for (const d of group.slice(1)) d.label = "";
    }
    return out;
  }

  function drawGraph(data) {
    document.getElementById("dag-label").textContent = graphLabel(data);
    const key = JSON.stringify(data.elements.map((e) => [e.data.id, e.data.label]));
    graphSource = data.source;
    if (!cy || key !== graphKey) {
      graphKey = key;
      if (cy) cy.destroy();
      cy = cytoscape({
        container: document.getElementById("dag"),
        elements: spaced(data.elements),
        userZoomingEnabled: true, boxSelectionEnabled: false, autoungrabify: true,
        style: [
          { selector: "node", style: {
              "shape": "round-rectangle", "width": 132, "height": 46, "label": "data(label)",
              "text-wrap": "wrap", "text-valign": "center", "font-size": 12, "color": "#13202e",
              "background-color": (n) => COLORS[n.data("state")] || COLORS.waiting,
              "border-width": 2, "border-color": "#3b4656" } },
          { selector: "node[state = 'running']", style: { "border-width": 4, "border-color": "#8a5a00" } },
          { selector: "node[state = 'done'], node[state = 'failed']", style: { "color": "#fff" } },
          { selector: "edge", style: {
              "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.6, "line-color": "#67758a",
              "target-arrow-color": "#67758a", "label": "data(label)", "font-size": 10, "text-rotation": "none", "text-wrap": "wrap",
              "text-background-color": "#fff", "text-background-opacity": 0.85, "text-background-padding": 2, "color": "#2c3a4c" } },
          { selector: "edge[bow != 0]", style: { "curve-style": "unbundled-bezier", "control-point-distances": "data(bow)", "control-point-weights": 0.5, "text-margin-x": "data(shift)" } },
          { selector: "edge[kind = 'route']", style: {
              "line-style": "dashed", "line-color": "#b0733a", "target-arrow-color": "#b0733a", "curve-style": "unbundled-bezier",
              "control-point-distances": [80], "control-point-weights": [0.5], "color": "#7a4a1c", "text-margin-x": 30 } },
        ],
        layout: { name: "preset", fit: true, padding: 28 },
      });
      separateLabels(cy);
      listHandoffs(data.elements);
      agentButtons(data.elements);
    }
    for (const [id, state] of Object.entries(data.states)) setState(id, state);
  }

  // Labels of edges that cross or run side by side can still land on each other (or on a node):
  // each label that overlaps one placed before it is moved along its edge's normal, by steps of
  // its own height, up or down, to the first free place.
  function separateLabels(cy) {
    const labelBox = (e) => e.boundingBox({ includeNodes: false, includeEdges: false, includeLabels: true,
                                            includeMainLabels: true, includeSourceLabels: false, includeTargetLabels: false,
                                            includeOverlays: false, includeUnderlays: false });
    const overlaps = (a, b) => a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
    const taken = cy.nodes().map((n) => n.boundingBox({ includeLabels: false, includeOverlays: false }));
    cy.edges().filter((e) => e.data("label")).forEach((e) => {
      const base = Number(e.style("text-margin-y").replace("px", "")) || 0;
      let box = labelBox(e);
      const step = (box.y2 - box.y1) + 3;
      for (let k = 1; k <= 12 && taken.some((t) => overlaps(box, t)); k++) {
        e.style("text-margin-y", base + (k % 2 ? 1 : -1) * Math.ceil(k / 2) * step);
        box = labelBox(e);
      }
      taken.push(box);
    });
  }

  // What an agent last did: its inputs, prompt, answer, code and output (agent_detail.py). A click
  // on the graph is mapped to the node under it here, from the page's own click event: cytoscape's
  // tap never fired on this page's graph (its mousedown handler did not run), while the DOM's click does.
  const detail = document.getElementById("agent-detail");
  const dagBox = document.getElementById("dag");
  if (dagBox) dagBox.addEventListener("click", (e) => {
    if (!cy) return;
    const rect = dagBox.getBoundingClientRect(), zoom = cy.zoom(), pan = cy.pan();
    const x = (e.clientX - rect.left - pan.x) / zoom, y = (e.clientY - rect.top - pan.y) / zoom;
    const hit = cy.nodes().filter((n) => { const b = n.boundingBox({ includeLabels: false }); return b.x1 <= x && x <= b.x2 && b.y1 <= y && y <= b.y2; });
    if (hit.length) showAgent(hit[0].id());
  });
  function showAgent(agent) {
    if (!detail) return;
    htmx.ajax("GET", detail.dataset.url.replace("AGENT", encodeURIComponent(agent)), { target: "#agent-detail", swap: "innerHTML" });
  }
  function agentButtons(elements) {
    const box = document.getElementById("agent-buttons");
    if (!box) return;
    box.replaceChildren(...elements.filter((e) => !e.data.source).map((e) => {
      const b = document.createElement("button");
      b.type = "button"; b.className = "link"; b.textContent = e.data.id;
      b.addEventListener("click", () => showAgent(e.data.id));
      return b;
    }));
  }

  // Fork: the chosen version's form, loaded when the section opens or the version changes.
  const forkBox = document.getElementById("fork");
  if (forkBox) {
    const pick = document.getElementById("fork-version");
    const load = () => htmx.ajax("GET", pick.selectedOptions[0].dataset.url, { target: "#fork-slot", swap: "innerHTML" });
    forkBox.addEventListener("toggle", () => { if (forkBox.open) load(); });
    pick.addEventListener("change", load);
  }

  // The contracts in full, as text: readable where the graph's labels are cut short.
  function listHandoffs(elements) {
    const body = document.querySelector("#handoffs tbody");
    body.replaceChildren();
    for (const e of elements) {
      if (!e.data.source) continue;
      const tr = document.createElement("tr");
      const cells = e.data.kind === "route" ? [e.data.source + " ⟲ " + e.data.target, "route on " + e.data.label]
                                            : [e.data.source + " → " + e.data.target, e.data.label.split(":")[0] + ": " + e.data.contract];
      for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
      body.appendChild(tr);
    }
  }

  function setState(agent, state) {
    if (!cy) return;
    const node = cy.getElementById(agent);
    if (node && node.length) node.data("state", state);
    const list = document.getElementById("dag-states");
    let li = document.getElementById("state-" + agent);
    if (!li) { li = document.createElement("li"); li.id = "state-" + agent; list.appendChild(li); }
    li.dataset.state = state;
    li.textContent = agent + ": " + state;
  }

  // A search that evolves programs (the tree) has no workflow panels: its tree card (tree.js) is all.
  const hasWorkflow = !!document.getElementById("dag");
  function loadGraph() { return hasWorkflow && trellisJSON(root.dataset.graph).then(drawGraph); }

  const CRITERIA = { goal_alignment: "g goal", collaboration_efficiency: "c collaboration", output_quality: "q quality", answer_plausibility: "a plausibility" };
  function drawScores(s) {
    const layout = (title, y) => ({ title: { text: title, font: { size: 13 }, x: 0.02 }, margin: { l: 44, r: 44, t: 34, b: 84 },
      height: 280, xaxis: { title: { text: "iteration", standoff: 4 }, dtick: 1 }, yaxis: y,
      legend: { orientation: "h", x: 0, y: -0.32, yanchor: "top", font: { size: 10 } },
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff" });
    const x = s.iteration;
    const none = x.length ? {} : { annotations: [{ text: "no probe judged yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { color: "#5b6575" } }],
                                   xaxis: { title: { text: "iteration", standoff: 4 }, range: [-0.5, 4.5], dtick: 1 } };
    const traces = [{ x, y: s.J, name: "J", mode: "lines+markers", line: { width: 3, color: "#1d2430" } },
                    { x, y: s.incumbent_J, name: "incumbent J", mode: "lines", line: { dash: "dot", color: "#2f8f5b" } }];
    for (const [k, label] of Object.entries(CRITERIA)) traces.push({ x, y: s.criteria[k], name: label, mode: "markers", marker: { size: 7 } });
    Plotly.react("chart-j", traces, { ...layout("J and its four criteria", { range: [0, 1.02] }), ...none }, { displayModeBar: false, responsive: true });
    Plotly.react("chart-checks", [
      { x, y: s.checks_passed, name: "checks passed", type: "bar", marker: { color: "#2f8f5b" } },
      { x, y: s.checks_total.map((t, i) => t - s.checks_passed[i]), name: "checks failed", type: "bar", marker: { color: "#c8423b" } },
      { x, y: s.tokens, name: "tokens spent", yaxis: "y2", mode: "lines+markers", line: { color: "#6b5bd6" } },
    ], { ...layout("Public checks and budget spent", { title: { text: "checks" }, rangemode: "tozero" }), ...none, barmode: "stack",
         yaxis2: { overlaying: "y", side: "right", title: { text: "tokens" }, rangemode: "tozero" } }, { displayModeBar: false, responsive: true });
  }
  let series = null;  // the score charts' data: loaded once, then extended point by point
  let scoresLoading = null, lateP = [];  // points that came while scores.json was on its way
  // Only a search whose probes are judged has the judge's charts.
  const hasScores = !!document.getElementById("chart-j");
  function loadScores() {
    if (!hasScores) return Promise.resolve();
    if (scoresLoading) return scoresLoading;
    const loading = scoresLoading = trellisJSON(root.dataset.scores).then((s) => {
      series = s; scoresLoading = null;
      for (const p of lateP.splice(0)) addPoint(p);
      drawScores(structuredClone(series));
    }, () => { if (scoresLoading === loading) scoresLoading = null; });  // the next load takes the late points
    return loading;
  }
  // Plotly.react redraws only data it sees as new, so it gets a copy, never the mutated arrays.
  const redrawScores = debounce(() => series && drawScores(structuredClone(series)), 150);
  // A point's index is its place in the series: appended once, whatever reached the page first.
  function addPoint(p) {
    if (scoresLoading) { lateP.push(p); return; }
    if (!series) return;
    if (p.index != null && p.index !== series.J.length) { if (p.index > series.J.length) loadScores(); return; }
    series.iteration.push(p.iteration); series.J.push(p.J); series.incumbent_J.push(p.incumbent_J);
    for (const k of Object.keys(series.criteria)) series.criteria[k].push(p.criteria[k]);
    series.checks_passed.push(p.checks_passed); series.checks_total.push(p.checks_total);
    series.validation.push(p.validation); series.tokens.push(p.tokens); series.calls.push(p.calls);
    redrawScores();
  }

  function showBudget(used) {
    const el = document.getElementById("budget");
    if (el && used) el.textContent = used.tokens + " / " + el.dataset.max + " tokens · " + used.calls + " calls";
  }

  // Fragments rendered for this viewer arrive inside messages; each replaces its part of the page.
  const TARGETS = { header: "run-header", queue: "queue", timeline: "timeline", diff: "diff" };
  function swap(el, markup) { el.innerHTML = markup; htmx.process(el); }
  function upsertMutation(pk, markup) {
    const box = document.createElement("div");
    box.innerHTML = markup.trim();
    const entry = box.firstElementChild;
    const old = document.getElementById("mutation-" + pk);
    if (old) old.replaceWith(entry);
    else {
      const queue = document.getElementById("queue");
      queue.querySelector(":scope > p.muted")?.remove();  // "No mutation proposed yet"
      queue.prepend(entry);
    }
    htmx.process(entry);
  }
  function applyFragments(html) {
    for (const [name, markup] of Object.entries(html)) {
      if (name.startsWith("mutation:")) upsertMutation(name.slice("mutation:".length), markup);
      else if (name === "editor") { if (document.getElementById("editor")) setEditor(markup); }
      else if (document.getElementById(TARGETS[name] || "")) swap(document.getElementById(TARGETS[name]), markup);
    }
  }

  function activity(msg) {
    const ol = document.getElementById("activity");
    const li = document.createElement("li");
    const d = msg.data || {};
    let text = msg.kind.replace(/_/g, " ");
    if (msg.agent) text += " · " + msg.agent;
    if (msg.kind === "agent_finished") text += " · " + d.status;
    if (msg.kind === "judgement" && d.point && d.point.J != null) text += " · J " + d.point.J.toFixed(3);
    if (msg.kind === "search_iteration" && d.accepted != null) text += d.accepted ? " · accepted" : " · not accepted";
    if (msg.kind === "mcp_tool_call") text += " · " + d.tool;
    if (msg.kind === "mcp_tool_result") text += " · " + d.tool + (d.ok ? " · ok" : " · ERROR " + (d.error || "").slice(0, 80));
    if (msg.kind === "tools_discovered") text += " · " + (d.servers || []).map(s => s.name + (s.ok ? " " + s.tools.length + " tools" : " not available")).join(", ");
    if (msg.kind === "tree_node") text += " · " + d.node + (d.score != null ? " " + d.score.toPrecision(4) : " failed");
    if (msg.kind === "status") text += " · " + msg.status;
    li.textContent = (msg.iteration != null ? "it " + msg.iteration + " · " : "") + text;
    li.className = "a-" + msg.kind;
    ol.prepend(li);
    while (ol.children.length > 14) ol.removeChild(ol.lastChild);
  }

  // One message, in order; ``dispatch``: hand it on to the other panels as well.
  function onMessage(msg, dispatch = true) {
    // one per epoch or few: the Training panel's curves say them
    if (msg.kind !== "training_progress" && msg.kind !== "training_checkpoint") activity(msg);
    if (msg.html) applyFragments(msg.html);
    const d = msg.data || {};
    switch (msg.kind) {
      case "agent_started": case "agent_finished": if (msg.source === graphSource) setState(msg.agent, d.state); break;
      case "run_started": if (hasWorkflow) drawGraph(d.graph); break;
      case "judgement": addPoint(d.point); break;
      case "model_call": showBudget(d.used); break;
      case "checkpoint": showBudget(msg.used); break;
    }
    if (dispatch) document.dispatchEvent(new CustomEvent("trellis:message", { detail: msg }));
  }

  // --- the live feed: numbered messages, gaps, catching up ------------------------------------
  // Engine events carry the run's event number (seq): they are applied in that order, and when one
  // is missing (lost on the way, or sent while the socket was down) the page fetches the missing
  // ones (events.json) and applies them first. Studio messages (status, decisions, versions,
  // annotations, a training worker's progress, people's records) carry the run's studio number
  // (sseq): a gap there re-reads what they change (header, queue, versions, diff, editor here; the
  // panels on "trellis:reconnected"). Every few seconds the server says the latest of both as they
  // were a few seconds before ("sync"), so that a lost last message is noticed too. Messages that
  // come during a catch-up wait for it.
  const JITTER_MS = 1000;  // pages told at once that they are behind do not all ask at once
  const recentMessages = JSON.parse((document.getElementById("recent-messages") || { textContent: "[]" }).textContent);
  const feed = { seq: Math.max(0, ...recentMessages.map((m) => m.seq || 0)), sseq: null, catching: false, held: [],
                 due: { events: false, until: null, studio: false }, open: false, rounds: 0, ws: null, asked: {} };
  const ready = Promise.all([loadGraph(), loadScores()]).catch(() => {});

  function receive(msg) {
    if (!msg || typeof msg !== "object") return;
    if (msg.kind === "sync") { noteSync(msg); return; }
    if (feed.catching) { feed.held.push(msg); return; }
    if (typeof msg.seq === "number") {
      if (msg.seq <= feed.seq) return;  // a catch-up brought it already
      if (msg.seq > feed.seq + 1) { feed.held.push(msg); catchUp({ events: true, until: msg.seq - 1 }); return; }
      feed.seq = msg.seq;
    } else if (typeof msg.sseq === "number") {
      const gap = feed.sseq === null || msg.sseq > feed.sseq + 1;
      if (feed.sseq === null || msg.sseq > feed.sseq) feed.sseq = msg.sseq;
      onMessage(msg);
      if (gap) catchUp({ studio: true });
      return;
    }
    onMessage(msg);
  }

  function noteSync(s) {
    const events = !!s.resync || s.seq > feed.seq;
    const studio = !!s.resync || (s.sseq != null && (feed.sseq === null || s.sseq > feed.sseq));
    if (events || studio) setTimeout(() => catchUp({ events, studio }), Math.random() * JITTER_MS);
  }

  function showFeed() {
    const state = document.getElementById("ws-state");
    root.dataset.catchUps = feed.rounds;
    if (!feed.open) return;  // "reconnecting…" stays until the socket is back
    state.textContent = feed.catching ? "catching up…" : "live";
    state.dataset.catching = feed.catching ? "1" : "0";
  }

  // what: {events, until (the last seq to fetch; none: up to now), studio}
  function catchUp(what) {
    const due = feed.due;
    if (what.events) {
      const until = what.until ?? null;
      due.until = !due.events ? until : (due.until === null || until === null ? null : Math.max(due.until, until));
      due.events = true;
    }
    due.studio = due.studio || !!what.studio;
    if (!feed.catching) rounds();
  }

  async function rounds() {
    feed.catching = true; feed.rounds += 1; showFeed();
    await ready;
    try {
      while (feed.due.events || feed.due.studio) {
        const { events, until, studio } = feed.due;
        feed.due = { events: false, until: null, studio: false };
        // Panels that reload themselves (studio) are not handed the events that reload brings.
        const base = await fetchMissed(!studio, events ? until : feed.seq, studio);
        if (studio) {
          if (base != null) feed.sseq = base;  // what the parts read now covers up to here
          await studioParts();
        }
      }
    } catch (err) {
      catchUp({ events: true, studio: true });
      setTimeout(rounds, 2000);  // the studio did not answer: try again, still holding what came
      return;
    }
    feed.catching = false;
    for (const msg of feed.held.splice(0)) receive(msg);  // a gap left among them starts the next round
    showFeed();
  }

  // The events after the last one applied (up to ``until``), applied in order; returns the run's
  // studio number as the server read it first (null when the socket answered: no one asked).
  // A gap's events are asked of the socket first: its web process answers from the events it
  // keeps, without a request or a query; it says null when it has not got them all.
  async function fetchMissed(dispatch, until, studio) {
    if (until !== null && until > feed.seq && !studio) {
      const got = await askSocket(feed.seq, until);
      for (const msg of got || []) {
        if (msg.seq !== feed.seq + 1) break;
        feed.seq = msg.seq;
        onMessage(msg, dispatch);
      }
      if (feed.seq >= until) return null;
    }
    let answer = null;
    do {
      const bound = until === null ? "" : "&until=" + until;
      const r = await fetch(root.dataset.events + "?after=" + feed.seq + bound);
      if (!r.ok) throw new Error("events.json " + r.status);
      answer = await r.json();
      for (const msg of answer.messages) {
        if (msg.seq <= feed.seq) continue;
        feed.seq = msg.seq;
        onMessage(msg, dispatch);  // shaped as it was sent live (webapp/runs/live.py)
      }
    } while (answer.more && answer.messages.length);
    return answer.sseq;
  }

  function askSocket(after, until) {
    return new Promise((resolve) => {
      const key = after + ":" + until;
      const done = (messages) => { clearTimeout(timer); delete feed.asked[key]; resolve(messages); };
      const timer = setTimeout(() => done(null), 2000);
      feed.asked[key] = done;
      try { feed.ws.send(JSON.stringify({ type: "missed", after, until })); } catch (err) { done(null); }
    });
  }

  // What studio messages change, read again; the panels reload on "trellis:reconnected".
  function studioParts() {
    const jobs = ["run-header", "queue", "timeline", "diff"].map((id) => document.getElementById(id))
      .filter((el) => el && (el.dataset.refresh || el.getAttribute("hx-get")))
      .map((el) => fetch(el.dataset.refresh || el.getAttribute("hx-get"))
        .then((r) => (r.ok ? r.text() : Promise.reject(new Error(r.status))))
        .then((markup) => swap(el, markup)).catch(() => {}));
    const editor = document.getElementById("editor");  // through setEditor: never under a person's typing
    if (editor) jobs.push(fetch(editor.getAttribute("hx-get")).then((r) => r.text()).then(setEditor).catch(() => {}));
    document.dispatchEvent(new CustomEvent("trellis:reconnected"));
    return Promise.all(jobs);
  }

  let backoff = 500;
  function connect() {
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = feed.ws = new WebSocket(proto + location.host + root.dataset.ws);
    const state = document.getElementById("ws-state");
    // What happened before this connection was open (between the page's render and the socket,
    // or while it was down) was not pushed to it: fetch what was missed, read the parts again.
    ws.onopen = () => {
      state.dataset.live = "1"; backoff = 500; feed.open = true;
      catchUp({ events: true, studio: true });
    };
    ws.onmessage = (e) => {
      let frame;
      try { frame = JSON.parse(e.data); } catch (err) { return; }
      if (frame && frame.kind === "missed") { (feed.asked[frame.after + ":" + frame.until] || (() => {}))(frame.messages); return; }
      for (const msg of Array.isArray(frame) ? frame : [frame]) receive(msg);
    };
    ws.onclose = () => {
      feed.open = false;
      state.textContent = "reconnecting…"; state.dataset.live = "0";
      setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 8000);
    };
  }

  // The editor follows new versions, but never wipes what a person is typing, nor the message
  // about their last edit while they read it: a new editor waits until they are done.
  let editorHoldUntil = 0, editorNext = null, lastEdit = null;
  function setEditor(markup) {
    const waiting = editorNext !== null;
    editorNext = markup;
    if (waiting) return;
    (function apply() {
      if (document.querySelector("#editor :focus") || Date.now() < editorHoldUntil) { setTimeout(apply, 2000); return; }
      swap(document.getElementById("editor"), editorNext);
      editorNext = null;
    })();
  }
  document.body.addEventListener("htmx:beforeRequest", (e) => {
    const form = e.detail.elt;
    if (form.tagName === "FORM" && form.closest("#editor")) lastEdit = { label: form.getAttribute("aria-label"), data: new FormData(form) };
  });
  document.body.addEventListener("htmx:afterSwap", (e) => {
    const box = e.detail.target;
    if (box.id !== "editor") return;
    const refused = box.querySelector("#edit-errors");
    if (refused || box.querySelector("#edit-saved")) editorHoldUntil = Date.now() + 20000;
    if (refused && lastEdit) {  // a refused edit keeps what was typed, to correct it
      const form = box.querySelector(`form[aria-label="${lastEdit.label}"]`);
      for (const [name, value] of lastEdit.data) if (form && form.elements[name] && form.elements[name].type !== "hidden") form.elements[name].value = value;
    }
    lastEdit = null;
  });

  // The editor's selects prefill their fields from the chosen edge or role.
  document.body.addEventListener("change", (e) => {
    const t = e.target;
    if (t.id === "contract-edge") document.getElementById("contract-type").value = t.selectedOptions[0].dataset.contract || "";
    if (t.id === "rewire-edge") {
      const o = t.selectedOptions[0].dataset;
      document.getElementById("rewire-source").value = o.source;
      document.getElementById("rewire-target").value = o.target;
      document.getElementById("rewire-contract").value = o.contract || "";
    }
    if (t.id === "procedure-role") document.getElementById("procedure-text").value = t.selectedOptions[0].dataset.text || "";
    if (t.id === "memory-role") {
      const o = t.selectedOptions[0].dataset;
      for (const f of ["records", "retrieves", "subscribes", "hints", "limit"]) document.getElementById("memory-" + f).value = o[f] || "";
    }
  });

  for (const msg of recentMessages) activity(msg);
  connect();
})();
