// Times for people (issue 26 item 2): every <time datetime="…Z"> the server renders (in UTC,
// saying so) is shown in the viewer's own time zone, named: "3 Dec 2026, 17:39 CET". The exact
// instant stays in the element's title. Fragments the page loads later (the report after undo,
// the history) are converted as they arrive. No inline script (CSP).
"use strict";
(function () {
  var format;
  try {
    format = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", timeZoneName: "short"
    });
  } catch (err) {
    return;  // no Intl: the UTC text the server wrote stays, and says UTC
  }
  function local(root) {
    if (!root.querySelectorAll) { return; }
    var found = root.matches && root.matches("time[datetime]") ? [root] : [];
    root.querySelectorAll("time[datetime]").forEach(function (t) { found.push(t); });
    found.forEach(function (t) {
      if (t.dataset.local) { return; }
      var when = new Date(t.getAttribute("datetime"));
      if (isNaN(when.getTime())) { return; }
      t.textContent = format.format(when);
      t.dataset.local = "true";
    });
  }
  local(document);
  new MutationObserver(function (changes) {
    changes.forEach(function (c) { c.addedNodes.forEach(local); });
  }).observe(document.body, { childList: true, subtree: true });
})();
