// amends Undo screen: the honest preview -> a confirmation that spells out the verbs -> the same
// list of steps turning into the report as each step settles (SSE) -> the server-rendered report
// (headline first). "Copy draft", "Mark handled", "Continue undo". No inline script (CSP); every
// POST carries the page key of this browser's own session (session.js). Two quick confirmations
// post twice and join one reversal (rule 6, enforced by the server).
"use strict";
(function () {
  var screen = document.getElementById("screen");
  var button = document.getElementById("undo");
  var dialog = document.getElementById("confirm");
  var yes = document.getElementById("confirm-yes");
  var no = document.getElementById("confirm-no");
  // the page key of this browser's own session, or the --no-auth page's token (session.js)
  var csrf = window.amendsCsrf || "";
  var streaming = null;
  var settled = 0;
  window.amendsReversalIds = [];

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Amends-CSRF": csrf },
      body: JSON.stringify(body || {})
    }).then(function (r) { return r.json().then(function (b) { return [r.status, b]; }); });
  }

  function say(text) {
    var summary = document.getElementById("summary");
    if (summary) { summary.textContent = text; }
  }

  function bind(root) {
    root.querySelectorAll("button.copy").forEach(function (b) {
      b.addEventListener("click", function () {
        var text = document.getElementById(b.dataset.target).value;
        var status = b.nextElementSibling;
        navigator.clipboard.writeText(text).then(function () {
          status.textContent = "Copied";
        }, function (err) {
          status.textContent = "Copy failed: " + err;
        });
      });
    });
    root.querySelectorAll("button.resolve").forEach(function (b) {
      b.addEventListener("click", function () {
        var status = b.nextElementSibling;
        b.disabled = true;
        post("/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/steps/" +
             encodeURIComponent(b.dataset.stepId) + "/resolve", {})
          .then(function (pair) {
            if (pair[0] !== 200) {
              b.disabled = false;
              status.textContent = "Error: " + (pair[1].detail || pair[1].error);
              return;
            }
            status.textContent = "Handled by " + pair[1].by;
            b.remove();
          });
      });
    });
    var cont = root.querySelector("#continue");
    if (cont) {
      cont.addEventListener("click", function () {
        cont.disabled = true;
        cont.textContent = "Continuing…";
        start("?continue=true");
      });
    }
  }

  // The preview's list becomes the progress view: each step gets a state label.
  function toProgress() {
    if (button) { button.remove(); button = null; }
    var heading = document.getElementById("preview-h");
    if (heading) { heading.textContent = "Undoing…"; }
    document.querySelectorAll("li.planned").forEach(function (li) {
      if (li.querySelector(".state")) { return; }
      var s = document.createElement("span");
      s.className = "state state-pending";
      s.textContent = "waiting";
      li.insertBefore(s, li.querySelector(".step-id"));
    });
    say("Undo requested — 0 steps settled so far.");
  }

  function stepSettled(s) {
    var li = document.querySelector("li.planned[data-step-id='" + CSS.escape(s.step_id) + "']");
    settled += 1;
    say("Undo running — " + settled + " step" + (settled === 1 ? "" : "s") + " settled so far.");
    if (!li) { return; }
    var label = li.querySelector(".state");
    if (label) {
      label.className = "state state-" + s.state;
      label.textContent = String(s.state).replace(/_/g, " ");
    }
    var verb = li.querySelector(".verb");
    if (verb && s.verb) { verb.textContent = s.verb; }
  }

  function showOutcome(reversalId) {
    fetch("/ui/reversals/" + encodeURIComponent(reversalId) + "/outcome",
          { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var preview = document.getElementById("preview");
        if (preview) { preview.remove(); }
        var outcome = document.getElementById("outcome");
        outcome.innerHTML = html;  // server-rendered, auto-escaped by Jinja
        bind(outcome);
        var h = document.getElementById("headline");
        if (h) { h.focus(); }
        refreshHistory();
      });
  }

  // The history (who asked for undo, when) as the server has it now.
  function refreshHistory() {
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector(".history");
        var old = document.querySelector(".history");
        if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); }
      });
  }

  function follow(reversalId) {
    if (streaming === reversalId) { return; }
    streaming = reversalId;
    var es = new EventSource("/reversals/" + encodeURIComponent(reversalId) + "/events");
    es.addEventListener("step", function (ev) { stepSettled(JSON.parse(ev.data)); });
    es.addEventListener("done", function () {
      es.close();
      streaming = null;
      showOutcome(reversalId);
    });
    es.addEventListener("stuck", function (ev) {
      es.close();
      streaming = null;
      say("Stuck: " + JSON.parse(ev.data).detail);
    });
    es.onerror = function () { es.close(); streaming = null; };
  }

  function start(query) {
    post("/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/undo" + (query || ""), {})
      .then(function (pair) {
        var body = pair[1];
        if (!body.reversal_id) { say("Error: " + (body.detail || body.error)); return; }
        window.amendsReversalIds.push(body.reversal_id);
        follow(body.reversal_id);
      });
  }

  if (button && dialog) {
    button.addEventListener("click", function () {
      dialog.showModal();
      yes.focus();
    });
    no.addEventListener("click", function () {
      dialog.close();
      if (button) { button.focus(); }
    });
    yes.addEventListener("click", function () {
      if (dialog.open) { dialog.close(); }
      toProgress();
      start("");
    });
  }
  bind(document);
})();
