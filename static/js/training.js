// The run page's Training panel (webapp/runs/training.py): every training job of the run with its
// device, status, progress bar, ETA and best validation, Pause / Cancel / Resume for reviewers,
// and one plotly chart per job (loss and validation by epoch) that grows as the job's
// training_progress events arrive over the run's WebSocket (run.js hands each message on as
// "trellis:message"). It loads once from training.json, again whenever the socket reopens. In
// a tree run, the tree card gets a "training curves of a node" chooser: a node whose validation
// trained shows its curves there (a tap on the node in the tree chooses it too).
(function () {
  "use strict";
  const panel = document.getElementById("training-panel");
  if (!panel) return;
  const $ = (id) => document.getElementById(id);
  const jobs = new Map();       // key -> row (training.json's, then kept live)
  let canControl = false;
  let loaded = false;
  const early = [];             // messages that came before training.json did

  // --- words ------------------------------------------------------------------------------------------
  const num = (v) => (v == null ? "–" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : (+v.toPrecision(4)).toString());
  function eta(s) {
    if (s == null) return "–";
    if (s < 60) return Math.round(s) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }
  const what = (j) => (j.node ? "node " + j.node + (j.purpose ? " · " + j.purpose : "") : j.purpose || "program");
  function statusWord(j) {
    if (j.status === "paused" && j.command === "stop") return "stopped with its run";
    if (j.command === "pause" && j.status === "running") return "pausing…";
    if (j.command === "cancel" && j.status !== "cancelled") return "cancelling…";
    return j.status;
  }
  // What a person may press is the server's to say (webapp/runs/training.py job_row); the list is
  // fetched again whenever a job starts or stops, so these follow.
  function can(j) { return j.can || {}; }
  function progressOf(j) { return j.epochs && j.epoch != null ? Math.min(1, Math.max(0, (j.epoch + 1) / j.epochs)) : null; }

  // --- the job list -----------------------------------------------------------------------------------
  // Each job keeps one row, updated in place: a row rebuilt on every epoch would swap its buttons
  // between a person's mousedown and mouseup, and the press would be lost.
  const rows = new Map();       // key -> {tr, parts} of the rows drawn
  let rowsWithControls = false;
  function buildRow(j) {
    const tr = document.createElement("tr");
    tr.id = "job-" + j.job;
    const cell = (cls) => { const td = document.createElement("td"); if (cls) td.className = cls; tr.appendChild(td); return td; };
    const code = document.createElement("code"); code.textContent = j.job.slice(0, 8); code.title = j.job; cell("mono").appendChild(code);
    const parts = { what: cell(), device: cell() };
    parts.badge = document.createElement("span"); cell().appendChild(parts.badge);
    const pr = cell("job-progress");
    parts.bar = document.createElement("progress"); parts.bar.max = 1;
    parts.bar.setAttribute("aria-label", "progress of job " + j.job.slice(0, 8));
    parts.label = document.createElement("span"); parts.label.className = "muted";
    pr.append(parts.bar, parts.label);
    parts.eta = cell(); parts.best = cell(); parts.buttons = {};
    if (canControl) {
      const td = cell("job-controls");
      for (const [action, label, cls] of [["pause", "Pause", ""], ["resume", "Resume", "primary"], ["cancel", "Cancel", "danger"]]) {
        const b = document.createElement("button"); b.type = "button"; b.textContent = label; b.className = cls;
        b.dataset.action = action; b.dataset.job = j.job;
        b.setAttribute("aria-label", label + " job " + j.job.slice(0, 8));
        td.appendChild(b); parts.buttons[action] = b;
      }
    }
    return { tr, parts };
  }
  function fillRow({ tr, parts }, j) {
    tr.dataset.status = j.status;
    parts.what.textContent = what(j); parts.device.textContent = j.device || "–";
    parts.badge.className = "badge s-" + j.status; parts.badge.textContent = statusWord(j);
    const p = progressOf(j);
    if (p != null) parts.bar.value = p; else parts.bar.removeAttribute("value");
    parts.label.textContent = j.epoch != null ? " epoch " + (j.epoch + 1) + (j.epochs ? " / " + j.epochs : "") : " not started";
    parts.eta.textContent = j.status === "running" ? eta(j.eta_s) : "–";
    parts.best.textContent = num(j.best_val);
    const ok = can(j);
    for (const [action, b] of Object.entries(parts.buttons)) b.disabled = !ok[action];
  }
  function row(j) {
    if (rowsWithControls !== canControl) { rows.clear(); rowsWithControls = canControl; }
    let drawn = rows.get(j.job);
    if (!drawn) { drawn = buildRow(j); rows.set(j.job, drawn); }
    fillRow(drawn, j);
    return drawn.tr;
  }

  function summary() {
    const list = [...jobs.values()];
    const running = list.filter((j) => j.status === "running").length;
    $("training-summary").textContent = list.length + (list.length === 1 ? " job" : " jobs") + (running ? " · " + running + " training now" : "");
  }

  let queued = false;
  function render() {  // at most once a frame
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      panel.hidden = jobs.size === 0;
      const body = $("training-jobs");
      const wanted = [...jobs.values()].map(row);
      // moved only when the order changed (a new job on top), never on an epoch
      if (wanted.length !== body.children.length || wanted.some((tr, i) => body.children[i] !== tr)) body.replaceChildren(...wanted);
      summary();
      for (const j of jobs.values()) drawCurve(j);
      nodeChooser();
    });
  }

  // --- curves -------------------------------------------------------------------------------------------
  // One point per epoch: an epoch trained again after a resume replaces what was reported before the stop.
  function points(j) {
    const by = new Map();
    for (const p of j.points || []) if (p.epoch != null) by.set(p.epoch, p);
    return [...by.values()].sort((a, b) => a.epoch - b.epoch);
  }
  const PALETTE = [["#1d2430", "#2f8f5b"], ["#2b5fb3", "#e0a526"], ["#8a3ea8", "#c8423b"], ["#3f9c99", "#9c755f"]];
  function traces(j, prefix = "", k = 0) {
    const ps = points(j), x = ps.map((p) => p.epoch + 1), [loss, val] = PALETTE[k % PALETTE.length];
    return [
      { x, y: ps.map((p) => p.loss ?? null), name: prefix + "training loss", mode: "lines+markers", marker: { size: 5 }, line: { color: loss } },
      { x, y: ps.map((p) => p.val ?? null), name: prefix + "validation", mode: "lines+markers", marker: { size: 5 }, line: { color: val, dash: "dot" } },
    ];
  }
  function layout(title, resumes) {
    return { title: { text: title, font: { size: 13 }, x: 0.02 }, height: 240, margin: { l: 50, r: 14, t: 32, b: 44 },
      xaxis: { title: { text: "epoch", standoff: 4 }, rangemode: "tozero" }, yaxis: { type: "log", dtick: 1, title: { text: "loss / val" } },
      legend: { orientation: "h", x: 0, y: -0.3, yanchor: "top", font: { size: 10 } }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fff",
      // where the job went on from a checkpoint (after a pause, a cancelled run, a killed worker)
      shapes: resumes.map((e) => ({ type: "line", x0: e + 1.5, x1: e + 1.5, yref: "paper", y0: 0, y1: 1, line: { dash: "dash", color: "#2b5fb3", width: 1.5 } })),
      annotations: resumes.map((e) => ({ x: e + 1.5, y: 1, yref: "paper", text: "resumed", showarrow: false, font: { size: 10, color: "#2b5fb3" }, yanchor: "bottom" })) };
  }
  function curveBox(j) {
    let box = $("curve-" + j.job);
    if (!box) {
      box = document.createElement("div"); box.id = "curve-" + j.job; box.className = "chart training-curve";
      box.setAttribute("role", "img"); box.dataset.job = j.job;
      $("training-curves").appendChild(box);
    }
    box.setAttribute("aria-label", "Training curve of job " + j.job.slice(0, 8) + " (" + what(j) + "): " + points(j).length + " epochs, best validation " + num(j.best_val));
    box.dataset.epochs = String(points(j).length);
    return box;
  }
  function drawCurve(j) {
    if (!window.Plotly || !(j.points || []).length) return;
    const box = curveBox(j);
    Plotly.react(box, traces(j), layout(j.job.slice(0, 8) + " · " + what(j) + " · " + j.device, j.resumes || []), { displayModeBar: false, responsive: true });
  }

  // --- a tree node's curves, in the tree card --------------------------------------------------------------
  let chosenNode = null;
  function nodeChooser() {
    const card = document.getElementById("tree-card");
    const nodes = [...new Set([...jobs.values()].map((j) => j.node).filter(Boolean))];
    if (!card || !nodes.length) return;
    let box = $("tree-training");
    if (!box) {
      box = document.createElement("div"); box.id = "tree-training"; box.className = "tree-training";
      box.innerHTML = '<label>Training curves of node <select id="tree-training-node"></select></label><div id="tree-node-curve" class="chart" role="img"></div>';
      (card.querySelector(".tree-wrap") || card.lastElementChild).after(box);
      $("tree-training-node").addEventListener("change", (e) => { chosenNode = e.target.value; drawNode(); });
    }
    const select = $("tree-training-node");
    if ([...select.options].map((o) => o.value).join() !== nodes.join()) {
      select.replaceChildren(...nodes.map((n) => { const o = document.createElement("option"); o.value = n; o.textContent = n; return o; }));
    }
    if (!nodes.includes(chosenNode)) chosenNode = nodes[nodes.length - 1];
    select.value = chosenNode;
    drawNode();
  }
  function drawNode() {
    const box = $("tree-node-curve");
    if (!box || !window.Plotly || !chosenNode) return;
    const mine = [...jobs.values()].filter((j) => j.node === chosenNode).reverse();  // oldest first
    const label = (j, k) => (mine.length < 2 ? "" : j.purpose === "final commitment" ? "final " : "job " + (k + 1) + " ");
    const data = mine.flatMap((j, k) => traces(j, label(j, k), k));
    box.setAttribute("aria-label", "Training curves of node " + chosenNode + ": " + mine.length + " job(s)");
    Plotly.react(box, data, layout("node " + chosenNode + ": its training, job by job (folds, final commitment)", []),
                 { displayModeBar: false, responsive: true });
  }
  document.addEventListener("trellis:node", (e) => {  // a node tapped in the tree (tree.js)
    if ([...jobs.values()].some((j) => j.node === e.detail)) { chosenNode = e.detail; nodeChooser(); }
  });

  // --- loading and live updates ---------------------------------------------------------------------------
  function apply(msg) {
    const d = msg.data || {};
    if (!d.job) return;
    let j = jobs.get(d.job);
    if (!j) {
      if (msg.kind !== "training_started") { load(); return; }  // a job this page has not seen: ask
      j = { job: d.job, points: [], resumes: [], runs: 0, status: "running" };
      jobs.set(d.job, j);
      // newest first, as training.json lists them
      const rest = [...jobs.entries()].filter(([k]) => k !== d.job);
      jobs.clear(); jobs.set(d.job, j); for (const [k, v] of rest) jobs.set(k, v);
    }
    switch (msg.kind) {
      case "training_started":
        Object.assign(j, { status: "running", device: d.device, purpose: d.purpose, node: d.node || j.node, command: null, eta_s: null });
        j.runs = (j.runs || 0) + 1;
        if (d.resumed_epoch != null && !(j.resumes || []).includes(d.resumed_epoch)) (j.resumes ||= []).push(d.resumed_epoch);
        break;
      case "training_progress":
        if (d.epoch != null) { j.epoch = d.epoch; (j.points ||= []).push({ epoch: d.epoch, loss: d.loss, val: d.val }); }
        if (d.epochs) j.epochs = d.epochs;
        if (d.device) j.device = d.device;
        j.eta_s = d.eta_s;
        if (d.val != null) j.best_val = j.best_val == null ? d.val : Math.min(j.best_val, d.val);
        break;
      case "training_checkpoint": j.checkpoint_epoch = d.epoch; break;
      case "training_finished": j.status = d.status; j.eta_s = null; break;
    }
    render();
    if (msg.kind === "training_finished" || msg.kind === "training_started") load();  // what may be pressed now
  }

  function take(state) {
    canControl = !!state.can_control;
    jobs.clear();
    for (const j of state.jobs) {
      j.resumes = j.runs > 1 && j.checkpoint_epoch != null && j.first_epoch ? [j.first_epoch - 1] : [];
      jobs.set(j.job, j);
    }
    loaded = true;
    for (const msg of early.splice(0)) apply(msg);
    render();
  }

  function load() {
    return fetch(panel.dataset.jobs, { headers: { Accept: "application/json" } })
      .then((r) => { if (!r.ok) throw new Error("training.json " + r.status); return r.json(); })
      .then(take)
      .catch((err) => { $("training-summary").textContent = "could not load the training jobs (" + err.message + ")"; });
  }

  // Pause / Cancel / Resume: the server says what happened, in words, and the job list as it is now.
  panel.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-action]");
    if (!b) return;
    b.disabled = true;
    const url = panel.dataset.control.replace("JOB", b.dataset.job).replace("ACTION", b.dataset.action);
    const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
    fetch(url, { method: "POST", headers: { ...headers, Accept: "application/json" } })
      .then((r) => r.json().then((body) => ({ ok: r.ok, body })))
      .then(({ ok, body }) => {
        $("training-said").textContent = ok ? body.message : body.error || "refused";
        $("training-said").className = "training-said " + (ok ? "ok" : "error");
        if (ok && body.jobs) take({ ...body, can_control: canControl });
        else render();
      })
      .catch(() => { $("training-said").textContent = "the studio did not answer"; render(); });
  });

  document.addEventListener("trellis:message", (e) => {
    const msg = e.detail || {};
    if (!String(msg.kind || "").startsWith("training_")) return;
    if (!loaded) early.push(msg); else apply(msg);
  });
  document.addEventListener("trellis:reconnected", () => { load(); });
  load();
})();
