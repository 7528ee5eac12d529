// Live refresh: while the page's <main> asks for it (data-live=ms), fetch the same page
// and swap in the new <main>; stop when the fresh page no longer asks (work settled).
"use strict";
(function () {
  function schedule(main) {
    var every = parseInt(main.dataset.live || "0", 10);
    if (every > 0) { setTimeout(refresh, every); }
  }
  function refresh() {
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var main = document.getElementById("live");
        if (!fresh || !main) { return; }
        main.replaceWith(fresh);
        schedule(fresh);
      })
      .catch(function () { setTimeout(refresh, 5000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("live");
    if (main) { schedule(main); }
  });
})();
