// amends web page: Undo with live progress (SSE), then the server-rendered outcome; "Mark
// handled" and "Continue undo". No inline script (CSP); every POST carries the page's CSRF token.
"use strict";
(function () {
  var button = document.getElementById("undo");
  var progress = document.getElementById("progress");
  var outcome = document.getElementById("outcome");
  var meta = document.querySelector("meta[name='amends-csrf']");
  var csrf = meta ? meta.getAttribute("content") : "";
  var streaming = null;
  window.amendsReversalIds = [];

  function line(text) {
    var li = document.createElement("li");
    li.textContent = text;
    progress.appendChild(li);
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Amends-CSRF": csrf },
      body: JSON.stringify(body || {})
    }).then(function (r) { return r.json().then(function (b) { return [r.status, b]; }); });
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
        var sagaId = outcome.dataset.sagaId;
        var status = b.nextElementSibling;
        b.disabled = true;
        post("/sagas/" + encodeURIComponent(sagaId) + "/steps/" +
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
        line("Continue requested…");
        start(cont.dataset.sagaId, "?continue=true");
      });
    }
  }

  function showOutcome(reversalId) {
    fetch("/ui/reversals/" + encodeURIComponent(reversalId) + "/outcome",
          { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        outcome.innerHTML = html;  // server-rendered, auto-escaped by Jinja
        bind(outcome);
        if (button) { button.remove(); button = null; }
        var h = document.getElementById("headline");
        if (h) { h.setAttribute("tabindex", "-1"); h.focus(); }
      });
  }

  function follow(reversalId) {
    if (streaming === reversalId) { return; }
    streaming = reversalId;
    var es = new EventSource("/reversals/" + encodeURIComponent(reversalId) + "/events");
    es.addEventListener("step", function (ev) {
      var s = JSON.parse(ev.data);
      line((s.verb || "Nothing to undo") + " " + s.tool + ": " + s.state);
    });
    es.addEventListener("done", function () {
      es.close();
      streaming = null;
      showOutcome(reversalId);
    });
    es.addEventListener("stuck", function (ev) {
      es.close();
      streaming = null;
      line("Stuck: " + JSON.parse(ev.data).detail);
    });
    es.onerror = function () { es.close(); streaming = null; };
  }

  function start(sagaId, query) {
    post("/sagas/" + encodeURIComponent(sagaId) + "/undo" + (query || ""), {})
      .then(function (pair) {
        var body = pair[1];
        if (!body.reversal_id) { line("Error: " + (body.detail || body.error)); return; }
        window.amendsReversalIds.push(body.reversal_id);
        if (button) { button.disabled = true; }
        follow(body.reversal_id);
      });
  }

  if (button) {
    button.addEventListener("click", function () {
      button.setAttribute("aria-busy", "true");
      if (!progress.childElementCount) { line("Undo requested…"); }
      start(button.dataset.sagaId, "");
    });
  }
  bind(document);
})();
