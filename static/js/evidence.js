// The run page's evidence graph (webapp/runs/evidence.py): records as nodes coloured by kind,
// links as edges styled by type, in columns by iteration and branch (a probe's branch, or the
// shared trunk). It loads once from evidence.json (again whenever the socket reopens) and then
// grows from the socket's messages, which run.js hands on as "trellis:message" events:
// evidence_recorded (a new record, a person's included), evidence_branch (a branch settled) and
// memory_retrieval (which records a role was given). Clicking a record fetches its whole text,
// versions, links and provenance. People with the annotator role or above add their own records.
(function () {
  "use strict";
  const panel = document.getElementById("evidence-panel");
  const run = document.getElementById("run");
  if (!panel || !run || typeof cytoscape === "undefined") return;
  const runId = run.dataset.run;

  const KIND_COLORS = {
    observation: "#2f74c0", finding: "#2f8f5b", hypothesis: "#9b5fa8", plan: "#f28e2b", question: "#d4b106",
    check_result: "#c8423b", execution: "#3f9c99", artifact: "#9c755f", lesson: "#4a5566", note: "#e05a9b",
  };
  const LINK_STYLES = {
    supports: { color: "#2f8f5b", style: "solid", width: 2.2 },
    contradicts: { color: "#c8423b", style: "solid", width: 2.8 },
    derived_from: { color: "#8792a2", style: "dashed", width: 1.4 },
    depends_on: { color: "#2b5fb3", style: "dotted", width: 2 },
    supersedes: { color: "#17202b", style: "solid", width: 1.8 },
    reuses: { color: "#3f9c99", style: "dashed", width: 2 },
  };
  const COL_W = 150, ROW_H = 62, HEAD_H = 46;

  const records = new Map();   // id -> summary (webapp/runs/evidence.py summary())
  const links = new Map();     // "s>t>type" -> {source, target, type}
  let branches = {};           // branch -> selected | rejected
  let given = {};              // record id -> [{role, iteration, how, event}]
  let meta = { kinds: Object.keys(KIND_COLORS), link_types: Object.keys(LINK_STYLES), can_write: false };
  const hiddenKinds = new Set();
  let selected = null;

  const cy = cytoscape({
    container: document.getElementById("ev-graph"),
    elements: [], boxSelectionEnabled: false, autoungrabify: true, wheelSensitivity: 0.3, minZoom: 0.15, maxZoom: 2.5,
    style: [
      { selector: "node.record", style: {
          "width": 26, "height": 26, "background-color": (n) => KIND_COLORS[n.data("kind")] || "#999",
          "label": "data(label)", "font-size": 10, "text-valign": "bottom", "text-margin-y": 3, "color": "#2c3a4c",
          "text-wrap": "ellipsis", "text-max-width": 140, "border-width": 1, "border-color": "#3b4656" } },
      { selector: "node.person", style: { "shape": "diamond", "width": 32, "height": 32, "border-width": 2.5, "border-color": "#17202b" } },
      { selector: "node.given", style: { "border-width": 4, "border-color": "#e0a526" } },
      { selector: "node.superseded", style: { "opacity": 0.55 } },
      { selector: "node.rejected", style: { "opacity": 0.4, "border-style": "dashed" } },
      // just arrived: a halo under the node, leaving its kind's colour as it is
      { selector: "node.fresh", style: { "underlay-color": "#e0a526", "underlay-opacity": 0.45, "underlay-padding": 7, "underlay-shape": "ellipse" } },
      { selector: "node:selected", style: { "border-width": 4, "border-color": "#17202b", "overlay-opacity": 0 } },
      { selector: "node.head", style: {
          "shape": "round-rectangle", "width": COL_W - 14, "height": 30, "background-color": "#f3f5f8", "border-width": 1,
          "border-color": "#dde1e7", "label": "data(label)", "font-size": 10, "text-wrap": "wrap", "text-max-width": COL_W - 20,
          "text-valign": "center", "color": "#5b6575", "events": "no" } },
      { selector: "node.head.h-selected", style: { "border-color": "#2f8f5b", "color": "#23784a", "background-color": "#eef8f1" } },
      { selector: "node.head.h-rejected", style: { "border-color": "#c8423b", "color": "#b3362f", "background-color": "#fdf0ef" } },
      { selector: "edge", style: {
          "curve-style": "bezier", "target-arrow-shape": "triangle", "arrow-scale": 0.8,
          "width": (e) => (LINK_STYLES[e.data("type")] || {}).width || 1.5,
          "line-color": (e) => (LINK_STYLES[e.data("type")] || {}).color || "#67758a",
          "target-arrow-color": (e) => (LINK_STYLES[e.data("type")] || {}).color || "#67758a",
          "line-style": (e) => (LINK_STYLES[e.data("type")] || {}).style || "solid" } },
      { selector: "edge[type = 'supersedes']", style: { "target-arrow-shape": "tee" } },
      { selector: ".hidden", style: { "display": "none" } },
    ],
    layout: { name: "preset" },
  });
  panel.cy = cy;  // for the browser test, which clicks records where they are drawn

  // --- state --------------------------------------------------------------------------------
  function status(r) { return r.branch == null ? "trunk" : (branches[r.branch] || "open"); }
  function nodeLabel(r) { return "#" + r.id + " " + r.kind.replace("_", " ") + (r.version > 1 ? " v" + r.version : ""); }
  function superseded(r) {
    for (const other of records.values()) if (other.lineage === r.lineage && other.version > r.version) return true;
    return false;
  }

  function addRecord(r, fresh) {
    if (records.has(r.id)) return false;
    records.set(r.id, r);
    const classes = ["record"];
    if (r.author && r.author.person) classes.push("person");
    if (fresh) classes.push("fresh");
    cy.add({ group: "nodes", data: { id: "r" + r.id, rid: r.id, kind: r.kind, label: nodeLabel(r) }, classes: classes.join(" ") });
    if (fresh) setTimeout(() => cy.getElementById("r" + r.id).removeClass("fresh"), 4000);
    return true;
  }
  function addLink(l) {
    const key = l.source + ">" + l.target + ">" + l.type;
    if (links.has(key)) return;
    links.set(key, l);
  }
  // Edges go in once both ends exist (a link may arrive with its source, before a late target).
  function syncEdges() {
    for (const [key, l] of links) {
      if (cy.getElementById("e" + key).length || !records.has(l.source) || !records.has(l.target)) continue;
      cy.add({ group: "edges", data: { id: "e" + key, source: "r" + l.source, target: "r" + l.target, type: l.type } });
    }
  }

  function merge(state) {
    branches = { ...branches, ...(state.branches || {}) };
    given = state.given || given;
    let added = 0;
    for (const r of state.records || []) if (addRecord(r, false)) added++;
    for (const l of state.links || []) addLink(l);
    return added;
  }

  // --- filters and layout -------------------------------------------------------------------
  const authorSel = document.getElementById("ev-author");
  const iterSel = document.getElementById("ev-iteration");
  const hideRejected = document.getElementById("ev-hide-rejected");

  function visible(r) {
    if (hiddenKinds.has(r.kind)) return false;
    if (authorSel.value && r.author_label !== authorSel.value) return false;
    if (iterSel.value !== "" && String(r.iteration ?? "") !== iterSel.value) return false;
    if (hideRejected.checked && status(r) === "rejected") return false;
    return true;
  }

  function fillSelect(sel, values, label) {
    const have = new Set(Array.from(sel.options).map((o) => o.value));
    for (const v of values) {
      if (have.has(v)) continue;
      const o = document.createElement("option");
      o.value = v; o.textContent = label(v);
      sel.appendChild(o);
    }
  }

  // Columns: one per (iteration, branch), in order of their first record; records stacked by id.
  function layout() {
    const cols = new Map();
    const ordered = Array.from(records.values()).sort((a, b) => a.id - b.id);
    for (const r of ordered) {
      const node = cy.getElementById("r" + r.id);
      node.toggleClass("rejected", status(r) === "rejected");
      node.toggleClass("superseded", superseded(r));
      node.toggleClass("given", !!(given[r.id] && given[r.id].length));
      node.toggleClass("hidden", !visible(r));
      if (!visible(r)) continue;
      const key = (r.iteration ?? "–") + "|" + (r.branch ?? "");
      if (!cols.has(key)) cols.set(key, { iteration: r.iteration, branch: r.branch, items: [] });
      cols.get(key).items.push(r);
    }
    const keys = Array.from(cols.keys()).sort((a, b) => {
      const A = cols.get(a), B = cols.get(b);
      const ia = A.iteration ?? -1, ib = B.iteration ?? -1;
      return ia !== ib ? ia - ib : A.items[0].id - B.items[0].id;
    });
    cy.batch(() => {
      cy.nodes(".head").remove();
      keys.forEach((key, i) => {
        const col = cols.get(key);
        const x = i * COL_W;
        const st = col.branch == null ? "trunk" : (branches[col.branch] || "open");
        const where = col.branch == null ? "shared trunk" : col.branch;
        cy.add({ group: "nodes", data: { id: "h" + i, label: "it " + (col.iteration ?? "–") + " · " + where + (st === "trunk" || st === "open" ? "" : "\n" + st) },
                 position: { x, y: 0 }, classes: "head h-" + st });
        col.items.forEach((r, j) => cy.getElementById("r" + r.id).position({ x, y: HEAD_H + j * ROW_H }));
      });
    });
    syncEdges();
    // An edge to a hidden record is hidden with it: cytoscape's edge routing reads both ends of a
    // shown edge, and one whose end is display:none threw "reading 'source'" while fitting the view.
    cy.edges().forEach((e) => { e.toggleClass("hidden", e.source().hasClass("hidden") || e.target().hasClass("hidden")); });
    listRecords(ordered.filter(visible));
    const shown = cy.nodes(".record").not(".hidden").length;
    panel.dataset.records = String(records.size);
    panel.dataset.shown = String(shown);
    document.getElementById("ev-count").textContent = records.size
      ? records.size + " record" + (records.size === 1 ? "" : "s") + (shown !== records.size ? " · " + shown + " shown" : "")
      : "no record yet";
    fillSelect(authorSel, Array.from(new Set(ordered.map((r) => r.author_label))).sort(), (v) => v);
    fillSelect(iterSel, Array.from(new Set(ordered.map((r) => String(r.iteration ?? "")))).sort((a, b) => a - b),
               (v) => (v === "" ? "none" : "iteration " + v));
    // The view follows the graph as it grows, until the person zooms or pans it themselves.
    if (!userMoved) {
      const shownNodes = cy.nodes().not(".hidden");  // nodes alone: their box needs no edge routing
      cy.fit(shownNodes, 24);
      if (cy.zoom() > 1.3) { cy.zoom(1.3); cy.center(shownNodes); }
    }
  }
  let userMoved = false;
  cy.on("scrollzoom dragpan pinchzoom", () => { userMoved = true; });
  cy.on("dbltap", (e) => { if (e.target === cy) { userMoved = false; layout(); } });
  // The same records as a table: readable without the canvas, and searchable with the browser's find.
  function listRecords(shown) {
    const body = document.getElementById("ev-list");
    if (!body) return;
    body.replaceChildren();
    for (const r of shown.slice().reverse()) {
      const tr = document.createElement("tr");
      tr.id = "ev-row-" + r.id;
      const open_ = document.createElement("button");
      open_.type = "button"; open_.className = "link"; open_.textContent = "#" + r.id;
      open_.setAttribute("aria-label", "open record " + r.id);
      open_.addEventListener("click", () => open(r.id));
      const cells = [open_, r.kind.replace("_", " "), r.author_label, r.iteration ?? "–",
                     (r.branch || "shared trunk") + (status(r) === "open" || status(r) === "trunk" ? "" : " (" + status(r) + ")"), r.preview];
      for (const c of cells) { const td = document.createElement("td"); td.append(c instanceof Node ? c : String(c)); tr.appendChild(td); }
      body.appendChild(tr);
    }
  }
  let pending = null;
  function relayout() { clearTimeout(pending); pending = setTimeout(layout, 120); }

  function legends() {
    const kinds = document.getElementById("ev-kinds");
    kinds.replaceChildren();
    for (const k of meta.kinds) {
      const li = document.createElement("li");
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox"; box.checked = !hiddenKinds.has(k); box.value = k; box.dataset.kind = k;
      box.addEventListener("change", () => { box.checked ? hiddenKinds.delete(k) : hiddenKinds.add(k); layout(); });
      const sw = document.createElement("i");
      sw.style.background = KIND_COLORS[k] || "#999";
      label.append(box, sw, document.createTextNode(k.replace("_", " ")));
      li.appendChild(label);
      kinds.appendChild(li);
    }
    const edges = document.getElementById("ev-link-legend");
    edges.replaceChildren();
    for (const t of meta.link_types) {
      const s = LINK_STYLES[t] || {};
      const li = document.createElement("li");
      const line = document.createElement("b");
      line.className = "ev-line";
      line.style.borderTop = Math.max(2, Math.round(s.width || 1.5)) + "px " + (s.style || "solid") + " " + (s.color || "#67758a");
      li.append(line, document.createTextNode(t.replace("_", " ")));
      edges.appendChild(li);
    }
  }
  authorSel.addEventListener("change", layout);
  iterSel.addEventListener("change", layout);
  hideRejected.addEventListener("change", layout);

  // --- a record's detail --------------------------------------------------------------------
  const detail = document.getElementById("ev-detail");
  function el(tag, text, cls) { const e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; }
  function a(href, text) { const e = el("a", text); e.href = href; e.target = "_blank"; e.rel = "noopener"; return e; }
  function givenText(g) { return (g.how === "pushed" ? "pushed to " : "given to ") + g.role + " in iteration " + g.iteration; }

  function showRecord(d) {
    detail.replaceChildren();
    const head = el("h3", "#" + d.id + " " + d.kind.replace("_", " ") + (d.version > 1 ? " (version " + d.version + ")" : ""));
    const sw = el("i"); sw.className = "ev-swatch"; sw.style.background = KIND_COLORS[d.kind] || "#999";
    head.prepend(sw);
    detail.appendChild(head);
    const dl = el("dl", null, "ev-facts");
    const fact = (k, v) => { dl.append(el("dt", k)); const dd = el("dd"); if (v instanceof Node) dd.append(v); else dd.textContent = v; dl.append(dd); };
    fact("author", d.author_label);
    fact("iteration", d.iteration == null ? "–" : String(d.iteration));
    const BRANCH = { trunk: "shared trunk: people's records and the search's lessons, seen by every probe",
                     open: "not settled yet", selected: "selected: later probes read it", rejected: "rejected: no later probe reads it" };
    fact("branch", d.branch ? d.branch + " · " + (BRANCH[d.status] || d.status) : BRANCH.trunk);
    if (d.tags && d.tags.length) fact("tags", d.tags.join(", "));
    const prov = el("span");
    if (d.event) prov.append(a("/runs/" + runId + "/events/" + d.event, (d.event_kind || "event").replace(/_/g, " ") + " #" + d.event + " (" + d.provenance.run_id + ")"), " ");
    else if (d.provenance && d.provenance.run_id) prov.append((d.provenance.run_id + (d.provenance.event_seq ? " event " + d.provenance.event_seq : "")) + " ");
    if (d.artifact) prov.append(a(d.artifact, "artifact " + d.provenance.artifact_sha256.slice(0, 10)), " ");
    if (d.program) prov.append(a(d.program, "program " + d.provenance.execution_sha256.slice(0, 10)));
    if (!prov.childNodes.length) prov.textContent = d.author && d.author.person ? "added in the studio (people.jsonl)" : "–";
    fact("provenance", prov);
    if (d.given && d.given.length) fact("given", d.given.map(givenText).join("; "));
    detail.appendChild(dl);
    detail.appendChild(el("pre", d.text, "ev-text"));
    if (d.history && d.history.length > 1) {
      detail.appendChild(el("h4", "Versions"));
      const ol = el("ol", null, "ev-versions");
      for (const v of d.history) {
        const li = el("li");
        const b = el("button", "v" + v.version + " · #" + v.id, "link");
        b.type = "button"; b.addEventListener("click", () => open(v.id));
        li.append(b, " " + v.author_label + " · " + (v.preview || "").slice(0, 90));
        if (v.id === d.id) li.className = "current";
        ol.appendChild(li);
      }
      detail.appendChild(ol);
    }
    if (d.links && d.links.length) {
      detail.appendChild(el("h4", "Links"));
      const ul = el("ul", null, "ev-linklist");
      for (const l of d.links) {
        const li = el("li");
        const b = el("button", "#" + l.other.id + " " + (l.other.kind || ""), "link");
        b.type = "button"; b.addEventListener("click", () => open(l.other.id));
        const type = l.type.replace("_", " ");
        if (l.direction === "out") li.append(type + " → ", b, ": " + (l.other.preview || "").slice(0, 80));
        else li.append("← ", b, " " + type + " this: " + (l.other.preview || "").slice(0, 80));
        ul.appendChild(li);
      }
      detail.appendChild(ul);
    }
    // People's annotations of this record (the studio's annotation list, as on trace events)
    const notes = el("div", null, "ann-slot");
    notes.setAttribute("hx-get", "/runs/" + runId + "/annotations?target_kind=evidence&target_ref=" + d.id);
    notes.setAttribute("hx-trigger", "load");
    notes.setAttribute("hx-swap", "outerHTML");
    detail.appendChild(notes);
    if (window.htmx) window.htmx.process(notes);
    const form = document.getElementById("ev-form");
    if (form) {  // link the person's record being written to this one
      const row = el("div", null, "ev-linkto");
      const type = el("select"); type.setAttribute("aria-label", "link type");
      for (const t of meta.link_types.filter((t) => t !== "supersedes")) { const o = el("option", t.replace("_", " ")); o.value = t; type.appendChild(o); }
      const b = el("button", "link my record to it", ""); b.type = "button";
      b.addEventListener("click", () => addFormLink(type.value, d.id, d.kind));
      row.append(type, b);
      detail.appendChild(row);
    }
  }
  function open(id) {
    selected = id;
    cy.nodes().unselect();
    cy.getElementById("r" + id).select();
    fetch("/runs/" + runId + "/evidence/" + id + ".json").then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((d) => { if (selected === id) showRecord(d); })
      .catch(() => { detail.replaceChildren(el("p", "Record #" + id + " could not be read.", "error")); });
  }
  cy.on("tap", "node.record", (e) => open(e.target.data("rid")));

  // --- people's records ---------------------------------------------------------------------
  const form = document.getElementById("ev-form");
  const chips = document.getElementById("ev-form-links");
  function addFormLink(type, id, kind) {
    if (chips.querySelector(`input[value="${type}:${id}"]`)) return;
    const li = el("li");
    const input = el("input"); input.type = "hidden"; input.name = "link"; input.value = type + ":" + id;
    const rm = el("button", "×", "link"); rm.type = "button"; rm.setAttribute("aria-label", "remove link to #" + id);
    rm.addEventListener("click", () => li.remove());
    li.append(input, type.replace("_", " ") + " #" + id + " " + (kind || "").replace("_", " ") + " ", rm);
    chips.appendChild(li);
  }
  if (form) form.addEventListener("submit", (e) => {
    e.preventDefault();
    const say = document.getElementById("ev-form-status");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    fetch(panel.dataset.add, { method: "POST", body: new FormData(form), headers: { "X-Requested-With": "fetch" } })
      .then((r) => r.json().then((body) => ({ ok: r.ok, status: r.status, body })).catch(() => ({ ok: false, status: r.status, body: {} })))
      .then(({ ok, status, body }) => {
        if (!ok) {
          say.className = "error";
          say.textContent = body.error || (status === 403 ? "Your role in this project cannot add records." : "The record was not added (" + status + ").");
          return;
        }
        const r = body.record;
        for (const l of body.links || []) addLink(l);
        if (addRecord(r, true)) layout();
        form.querySelector("textarea").value = "";
        chips.replaceChildren();
        say.className = "ok";
        say.textContent = "Added as record #" + r.id + " (" + r.kind + "). Agents that retrieve or subscribe to " + r.kind + "s see it at their next step.";
      })
      .catch(() => { say.className = "error"; say.textContent = "The studio did not answer; nothing was added."; })
      .finally(() => { button.disabled = false; });
  });

  // --- live ---------------------------------------------------------------------------------
  let retries = 0;  // a graph read in the instant it is created answers with an error: ask again, a few times
  function load() {
    return trellisJSON(panel.dataset.state).then((state) => {
      retries = 0;
      meta = state;
      if (!document.getElementById("ev-kinds").children.length) legends();
      merge(state);
      layout();
    }).catch(() => { if (retries++ < 5) setTimeout(load, 2000); });
  }
  document.addEventListener("trellis:message", (e) => {
    const msg = e.detail, d = msg.data || {};
    if (msg.kind === "evidence_recorded" && d.record) {
      for (const l of d.links || []) addLink(l);
      if (addRecord(d.record, true)) relayout();
      else syncEdges();
    } else if (msg.kind === "evidence_branch" && d.branch) {
      branches[d.branch] = d.status;
      relayout();
    } else if (msg.kind === "memory_retrieval") {
      for (const [how, ids] of [["retrieved", d.records || []], ["pushed", d.pushed || []]]) {
        for (const id of ids) (given[id] ||= []).push({ role: d.role || msg.agent, agent: msg.agent, iteration: msg.iteration, how, event: msg.seq });
      }
      if ((d.records || []).length || (d.pushed || []).length) relayout();
    }
  });
  document.addEventListener("trellis:reconnected", load);
  load();
})();
