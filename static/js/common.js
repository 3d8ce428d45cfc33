// Behaviour every page may use, without inline handlers (the Content-Security-Policy forbids them):
// a read-only link field selects itself on click; a select marked data-autosubmit submits its form.
document.addEventListener("click", (e) => { if (e.target.matches("input.share-url")) e.target.select(); });
document.addEventListener("change", (e) => { if (e.target.matches("select[data-autosubmit]")) e.target.form.submit(); });

// JSON from the studio, or a rejected promise naming the status: an error page (HTML) is never
// parsed as JSON, and each caller says or retries what it could not load.
window.trellisJSON = (url) => fetch(url).then((r) => {
  if (!r.ok) throw new Error(url + " answered " + r.status);
  return r.json();
});
