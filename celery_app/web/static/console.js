// Live updates: a page whose <main> names an event stream (data-stream, see event_log.py)
// listens to it; when new events arrive it fetches the same page again and swaps in the
// new <main>, at most once a second. The browser reconnects a stream that ends, resuming
// after the last event it saw. A refresh that fails is tried again (after 2 s, doubling to
// a minute): the event that asked for it may be the last one for a long time.
"use strict";
(function () {
  var MIN_GAP_MS = 1000;
  var FIRST_RETRY_MS = 2000;
  var MAX_RETRY_MS = 60000;
  var pending = false;
  var last = 0;
  var retry = FIRST_RETRY_MS;
  function refresh() {
    pending = false;
    last = Date.now();
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var main = document.getElementById("live");
        if (fresh && main) { main.replaceWith(fresh); }
        retry = FIRST_RETRY_MS;
      })
      .catch(function () {
        setTimeout(changed, retry);
        retry = Math.min(2 * retry, MAX_RETRY_MS);
      });
  }
  function changed() {
    if (pending) { return; }
    pending = true;
    setTimeout(refresh, Math.max(0, last + MIN_GAP_MS - Date.now()));
  }
  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("live");
    if (!main || !main.dataset.stream || !window.EventSource) { return; }
    var source = new EventSource(main.dataset.stream);
    source.addEventListener("events", changed);
    window.addEventListener("pagehide", function () { source.close(); });
  });
})();
