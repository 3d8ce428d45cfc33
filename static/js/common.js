// Behaviour every page may use, without inline handlers (the Content-Security-Policy forbids them):
// a read-only link field selects itself on click; a select marked data-autosubmit submits its form.
document.addEventListener("click", (e) => { if (e.target.matches("input.share-url")) e.target.select(); });
document.addEventListener("change", (e) => { if (e.target.matches("select[data-autosubmit]")) e.target.form.submit(); });
