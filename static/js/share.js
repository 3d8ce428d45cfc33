// A shared run's page (templates/runs/share_run.html): the run's scripts ask for /runs/<id>/...,
// which needs an account; through a share link the same things live under /share/<signed>/.
// Loaded first, this points their fetches, htmx requests and links there.
(function () {
  const me = document.currentScript.dataset;
  const from = "/runs/" + me.run + "/";
  const inside = (url) => (typeof url === "string" && url.startsWith(from) ? me.prefix + url.slice(from.length) : url);
  const fetch = window.fetch.bind(window);
  window.fetch = (input, init) => fetch(inside(input), init);
  document.addEventListener("htmx:configRequest", (e) => { e.detail.path = inside(e.detail.path); });
  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a[href]");
    if (a && a.getAttribute("href").startsWith(from)) a.setAttribute("href", inside(a.getAttribute("href")));
  }, true);
})();
