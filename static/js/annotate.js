// Team annotation (issue 13). Two parts:
//  - every annotation list on a page (.annotations, templates/runs/annotation_list.html) is
//    fetched again when someone annotates the same target: on the run page the message comes
//    through run.js ("trellis:message"); elsewhere (the trace) this file opens the run's socket;
//  - the queue work page (#queue-work) is driven by the keyboard.
(function () {
  "use strict";

  // --- live annotation lists ----------------------------------------------------------------
  // A draft is anything a person has put in a list's forms and not posted: a comment, a reply,
  // a ticked label, a score. A list holding one is never swapped under them, neither when the
  // news arrives nor when a read already in flight comes back after they started; it is marked
  // stale and read again once the draft is gone (posted, or emptied and left).
  function hasDraft(el) {
    return [...el.querySelectorAll("textarea, input")].some((f) =>
      f.type === "checkbox" || f.type === "radio" ? f.checked : f.type !== "hidden" && f.value.trim() !== "");
  }
  function reread(el) {
    delete el.dataset.stale;
    htmx.ajax("GET", el.dataset.url, { target: el, swap: "outerHTML", headers: { "X-Trellis-Reread": "1" } });
  }
  function refresh(kind, ref) {
    document.querySelectorAll(".annotations").forEach((el) => {
      if (el.dataset.target !== kind + ":" + ref || !window.htmx) return;
      if (hasDraft(el)) { el.dataset.stale = "1"; return; }
      reread(el);
    });
  }
  document.addEventListener("htmx:beforeSwap", (e) => {
    const headers = (e.detail.requestConfig && e.detail.requestConfig.headers) || {};
    const el = e.detail.target;
    if (!headers["X-Trellis-Reread"] || !el || !el.matches || !el.matches(".annotations")) return;
    if (hasDraft(el)) { e.detail.shouldSwap = false; el.dataset.stale = "1"; }
  });
  // A list left stale under a draft catches up once the draft is gone and the person has left
  // the list (unless they posted: then htmx swapped it already).
  document.addEventListener("focusout", (e) => {
    const el = e.target.closest && e.target.closest(".annotations[data-stale]");
    if (!el || !window.htmx) return;
    setTimeout(() => {
      if (!el.isConnected || el.contains(document.activeElement) || hasDraft(el)) return;
      reread(el);
    }, 200);
  });

  function onMessage(msg) {
    if (msg && msg.kind === "annotation") refresh(msg.target_kind, String(msg.target_ref));
  }
  // Every list at once: after a gap in the studio's messages (one may have been an annotation)
  // or a socket that was down.
  function refreshAll() {
    const targets = new Set([...document.querySelectorAll(".annotations")].map((el) => el.dataset.target));
    for (const t of targets) { const i = t.indexOf(":"); refresh(t.slice(0, i), t.slice(i + 1)); }
  }
  document.addEventListener("trellis:message", (e) => onMessage(e.detail));
  document.addEventListener("trellis:reconnected", refreshAll);

  let socketOpen = false;
  function ownSocket() {
    const host = document.querySelector("[data-annotations-ws]");
    if (socketOpen || !host || document.getElementById("run")) return;  // run.js has the socket on the run page
    socketOpen = true;
    const path = host.dataset.annotationsWs;
    let backoff = 500;
    (function connect() {
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      const ws = new WebSocket(proto + location.host + path);
      // Annotations are studio messages, numbered (sseq): a number that is not the next one, or a
      // sync saying a later one was sent, means one was missed; every list is read again.
      let sseq = null;
      ws.onopen = () => { backoff = 500; document.body.dataset.annotationsLive = "1"; if (sseq !== null) refreshAll(); };
      ws.onmessage = (e) => {
        let frame;
        try { frame = JSON.parse(e.data); } catch (err) { return; }
        for (const msg of Array.isArray(frame) ? frame : [frame]) {
          if (!msg || typeof msg.sseq !== "number") continue;
          const missed = (sseq !== null && msg.sseq > sseq + (msg.kind === "sync" ? 0 : 1));
          if (msg.kind !== "sync" || sseq === null) sseq = Math.max(sseq || 0, msg.sseq);
          if (missed) { sseq = msg.sseq; refreshAll(); }
          onMessage(msg);
        }
      };
      ws.onclose = () => { document.body.dataset.annotationsLive = "0"; setTimeout(connect, backoff); backoff = Math.min(backoff * 2, 8000); };
    })();
  }

  // A label set's choices show when it is picked; the others are disabled, so not sent.
  document.addEventListener("change", (e) => {
    const select = e.target.closest(".ann-set");
    if (!select) return;
    select.form.querySelectorAll(".ann-choices").forEach((fs) => {
      const on = fs.dataset.set === select.value;
      fs.hidden = !on; fs.disabled = !on;
    });
  });

  // --- the queue, one item at a time ----------------------------------------------------------
  function queueWork(root) {
    const form = document.getElementById("qw-form");
    const status = document.getElementById("qw-status");
    const comment = document.getElementById("qw-comment");
    let busy = false;

    function go(url) { if (url) location.assign(url); }
    function save(skip) {
      if (busy) return;
      const body = new FormData(form);
      if (skip) body.set("skip", "1");
      else if (!body.getAll("labels").length && !body.get("passed") && !body.get("score") && !(body.get("comment") || "").trim()) {
        status.textContent = "Choose a label (keys 1–9), pass or fail, a score, or write a comment; s skips the item.";
        status.className = "error"; return;
      }
      busy = true; status.className = "muted"; status.textContent = skip ? "Skipping…" : "Saving…";
      const token = document.body.getAttribute("hx-headers");
      fetch(root.dataset.save, { method: "POST", body, headers: JSON.parse(token || "{}") })
        .then((r) => r.json().then((data) => ({ ok: r.ok, data })))
        .then(({ ok, data }) => {
          busy = false;
          if (!ok) { status.className = "error"; status.textContent = data.error || "not saved"; return; }
          status.textContent = skip ? "Skipped." : "Saved.";
          go(data.next);
        })
        .catch(() => { busy = false; status.className = "error"; status.textContent = "not saved: the studio did not answer"; });
    }

    form.addEventListener("submit", (e) => { e.preventDefault(); save(false); });
    document.getElementById("qw-skip").addEventListener("click", () => save(true));
    document.getElementById("qw-prev").addEventListener("click", () => go(root.dataset.prev));

    document.addEventListener("keydown", (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const inText = e.target.matches("textarea, input[type=text], input[type=number], input:not([type])");
      if (inText) {
        if (e.key === "Escape") e.target.blur();
        else if (e.key === "Enter" && !e.shiftKey && e.target === comment) { e.preventDefault(); save(false); }
        return;
      }
      const box = form.querySelector(`input[data-key="${e.key}"]`);
      if (box) { e.preventDefault(); box.checked = !box.checked; return; }
      const pass = form.querySelector(`input[name=passed][value=${e.key === "+" ? "pass" : e.key === "-" ? "fail" : "none"}]`);
      if (pass) { e.preventDefault(); pass.checked = true; return; }
      switch (e.key) {
        case "Enter": e.preventDefault(); save(false); break;
        case "s": e.preventDefault(); save(true); break;
        case "j": case "n": e.preventDefault(); go(root.dataset.next || root.dataset.done); break;
        case "k": case "p": e.preventDefault(); go(root.dataset.prev); break;
        case "c": e.preventDefault(); comment.focus(); break;
      }
    });
  }

  // The trace loads an event's annotations when its details open: the socket opens with the first.
  document.addEventListener("htmx:load", ownSocket);
  document.addEventListener("DOMContentLoaded", () => {
    ownSocket();
    const root = document.getElementById("queue-work");
    if (root) queueWork(root);
  });
})();
