// amends web page: Undo with live progress (SSE), then the server-rendered outcome.
"use strict";
(function () {
  var button = document.getElementById("undo");
  var progress = document.getElementById("progress");
  var outcome = document.getElementById("outcome");
  var streaming = null;
  window.amendsReversalIds = [];

  function line(text) {
    var li = document.createElement("li");
    li.textContent = text;
    progress.appendChild(li);
  }

  function bindCopy(root) {
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
  }

  function showOutcome(reversalId) {
    fetch("/ui/reversals/" + encodeURIComponent(reversalId) + "/outcome")
      .then(function (r) { return r.text(); })
      .then(function (html) {
        outcome.innerHTML = html;
        bindCopy(outcome);
        if (button) { button.remove(); }
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
      showOutcome(reversalId);
    });
    es.onerror = function () { es.close(); streaming = null; };
  }

  if (button) {
    button.addEventListener("click", function () {
      button.setAttribute("aria-busy", "true");
      if (!progress.childElementCount) { line("Undo requested…"); }
      fetch("/sagas/" + encodeURIComponent(button.dataset.sagaId) + "/undo", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}"
      }).then(function (r) { return r.json().then(function (b) { return [r.status, b]; }); })
        .then(function (pair) {
          var body = pair[1];
          if (!body.reversal_id) { line("Error: " + (body.detail || body.error)); return; }
          window.amendsReversalIds.push(body.reversal_id);
          button.disabled = true;
          follow(body.reversal_id);
        });
    });
  }
  bindCopy(document);
})();
