// amends Undo screen: the honest preview -> a confirmation that spells out the verbs -> the same
// list of steps turning into the report as each step settles (SSE) -> the server-rendered report
// (headline first). "Copy draft", "Mark handled…" / "Withdraw…" (a note, then a confirmation as
// the signed-in person), "Retry…", "Continue undo", "Undo only this" (issue 27: a confirmation
// that shows the selection's closure) and "Undo the rest…". No inline script (CSP); every
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

  // Text from the server's JSON (an error's detail, a follow-up's outcome, a vendor's words)
  // is shown by amends' one rule (amends._visible; the page names its characters in
  // data-hidden): every character a person cannot see or that moves other text is a visible
  // escape, and a mark past the 4th on one letter too, as on the server-rendered page.
  var HIDDEN = new RegExp(document.documentElement.dataset.hidden || "[\\p{C}\\p{Zl}\\p{Zp}]", "gu");
  var MARK_RUN = /[\p{Mn}\p{Me}]+/gu;
  var MAX_MARKS = Number(document.documentElement.dataset.maxMarks || 4);
  function esc(c) {
    var named = { "\n": "\\n", "\r": "\\r", "\t": "\\t" }[c];
    if (named) { return named; }
    var code = c.codePointAt(0);
    var hex = code.toString(16);
    if (code < 0x100) { return "\\x" + ("0" + hex).slice(-2); }
    if (code < 0x10000) { return "\\u" + ("000" + hex).slice(-4); }
    return "\\U" + ("0000000" + hex).slice(-8);
  }
  function shown(text) {
    return String(text).replace(HIDDEN, esc).replace(MARK_RUN, function (run, at) {
      var marks = Array.from(run);
      var kept = at === 0 ? 0 : MAX_MARKS;  // a mark with no base joins the text before it
      return marks.slice(0, kept).join("") + marks.slice(kept).map(esc).join("");
    });
  }

  function say(text) {
    var summary = document.getElementById("summary");
    if (summary) { summary.textContent = shown(text); }
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
    // "Mark handled…" and "Withdraw…" ask for a note, then confirm as the signed-in person:
    // the server records the token's identity, never a name typed here (rule 12).
    root.querySelectorAll("button.resolve, button.withdraw").forEach(function (b) {
      b.addEventListener("click", function () {
        var item = b.closest("li.manual-action");
        var form = item.querySelector("form.note-form");
        var yes = form.querySelector(".note-yes");
        var withdraw = b.classList.contains("withdraw");
        form.dataset.mode = withdraw ? "withdraw" : "resolve";
        form.querySelector(".note-label").textContent = withdraw ?
          "Why withdraw it (it was not handled after all)?" : "What did you do or check?";
        yes.textContent = withdraw ? yes.dataset.withdraw : yes.dataset.mark;
        form.hidden = false;
        form.querySelector("textarea.note").focus();
      });
    });
    root.querySelectorAll("form.note-form").forEach(function (form) {
      var item = form.closest("li.manual-action");
      var status = item.querySelector(".resolve-status");
      form.querySelector(".note-no").addEventListener("click", function () {
        form.hidden = true;
      });
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var note = form.querySelector("textarea.note").value.trim();
        if (!note) { status.textContent = "Say what you did or checked first."; return; }
        var yes = form.querySelector(".note-yes");
        yes.disabled = true;
        post("/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/steps/" +
             encodeURIComponent(form.dataset.stepId) + "/" + form.dataset.mode, { note: note })
          .then(function (pair) {
            yes.disabled = false;
            if (pair[0] !== 200) {
              status.textContent = shown("Error: " + (pair[1].detail || pair[1].error));
              return;
            }
            status.textContent = shown((pair[1].withdrawn ? "Withdrawn by " : "Handled by ") + pair[1].by);
            refreshOutcome();
          });
      });
    });
    // "Send…" (issue 27): the draft, edited, sent through a catalog tool as a follow-up of the
    // reversal; the person sees the recipients and confirms as the signed-in identity (rule 12).
    root.querySelectorAll("button.send").forEach(function (b) {
      var form = document.getElementById(b.getAttribute("aria-controls"));
      b.addEventListener("click", function () {
        form.hidden = false;
        form.querySelector("textarea.send-text").focus();
      });
      form.querySelector(".send-no").addEventListener("click", function () {
        form.hidden = true;
        b.focus();
      });
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var status = item(b).querySelector(".resolve-status");
        var args;
        try {
          args = JSON.parse(form.querySelector("textarea.send-args").value || "{}");
        } catch (err) {
          status.textContent = "The arguments are not JSON: " + err.message;
          return;
        }
        if (typeof args !== "object" || args === null || Array.isArray(args)) {
          status.textContent = "The arguments must be a JSON object, e.g. {\"to\": \"bob@example.com\"}";
          return;
        }
        args[form.querySelector("input.send-text-arg").value.trim()] =
          form.querySelector("textarea.send-text").value;
        var yes = form.querySelector(".send-yes");
        yes.disabled = true;
        post("/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/steps/" +
             encodeURIComponent(form.dataset.stepId) + "/follow-up",
             { tool: form.querySelector("input.send-tool").value.trim(), args: args })
          .then(function (pair) {
            yes.disabled = false;
            var body = pair[1];
            if (pair[0] !== 200) {
              status.textContent = shown("Not sent: " + (body.detail || body.error));
              return;
            }
            status.textContent = shown(body.state === "sent" ?
              "Sent by " + body.by + " (" + body.follow_up_id + ")" :
              (body.state === "in_doubt" ? "In doubt: " : "Not sent: ") + body.detail);
            if (body.state === "sent") { refreshOutcome(); }
          });
      });
    });
    // "Retry…" (a failed compensation whose cause a person fixed): confirm, then the same
    // reversal continues; its steps settle as before (SSE) and the report is shown again.
    root.querySelectorAll("button.retry").forEach(function (b) {
      var panel = document.getElementById(b.getAttribute("aria-controls"));
      b.addEventListener("click", function () {
        panel.hidden = false;
        panel.querySelector(".retry-yes").focus();
      });
      panel.querySelector(".retry-no").addEventListener("click", function () {
        panel.hidden = true;
        b.focus();
      });
      panel.querySelector(".retry-yes").addEventListener("click", function (ev) {
        ev.target.disabled = true;
        ev.target.textContent = "Retrying…";
        post("/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/retry",
             { steps: [b.dataset.stepId] })
          .then(function (pair) {
            var body = pair[1];
            if (!body.reversal_id) {
              ev.target.disabled = false;
              ev.target.textContent = "Yes: retry";
              item(b).querySelector(".resolve-status").textContent =
                shown("Error: " + (body.detail || body.error));
              return;
            }
            window.amendsReversalIds.push(body.reversal_id);
            follow(body.reversal_id);
          });
      });
    });
    // issue 27: "Undo the rest…" after a selective undo: confirm, then the same reversal is
    // extended to the whole saga (what is already undone is never sent again).
    var rest = root.querySelector("#undo-rest");
    if (rest) {
      var panel = root.querySelector("#undo-rest-confirm");
      rest.addEventListener("click", function () {
        panel.hidden = false;
        panel.querySelector(".undo-rest-yes").focus();
      });
      panel.querySelector(".undo-rest-no").addEventListener("click", function () {
        panel.hidden = true;
        rest.focus();
      });
      panel.querySelector(".undo-rest-yes").addEventListener("click", function (ev) {
        ev.target.disabled = true;
        ev.target.textContent = "Undoing the rest…";
        start("");
      });
    }
    // "Continue undo…": confirm first, naming each step the continuation will attempt and
    // what its undo sends (as Undo and Retry do), then the same reversal continues.
    var cont = root.querySelector("#continue");
    if (cont) {
      var contPanel = root.querySelector("#continue-confirm");
      cont.addEventListener("click", function () {
        contPanel.hidden = false;
        contPanel.querySelector(".continue-yes").focus();
      });
      contPanel.querySelector(".continue-no").addEventListener("click", function () {
        contPanel.hidden = true;
        cont.focus();
      });
      contPanel.querySelector(".continue-yes").addEventListener("click", function (ev) {
        ev.target.disabled = true;
        cont.disabled = true;
        ev.target.textContent = "Continuing…";
        start("?continue=true");
      });
    }
  }

  // The preview's list becomes the progress view: each step gets a state label (of a
  // selection, issue 27: only the steps it covers).
  function toProgress(only) {
    if (button) { button.remove(); button = null; }
    document.querySelectorAll("button.undo-only").forEach(function (b) { b.remove(); });
    var heading = document.getElementById("preview-h");
    if (heading) { heading.textContent = "Undoing…"; }
    document.querySelectorAll("li.planned").forEach(function (li) {
      if (li.querySelector(".state")) { return; }
      if (only && only.indexOf(li.dataset.stepId) < 0) { return; }
      var s = document.createElement("span");
      s.className = "state state-pending";
      s.textContent = "waiting";
      li.querySelector(".sentence").after(" ", s);
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

  function item(el) { return el.closest("li.manual-action"); }

  // The outcome as the server has it now (after a resolution or its withdrawal).
  function refreshOutcome() {
    var section = document.querySelector("#outcome section.outcome");
    if (section) { showOutcome(section.dataset.reversalId); }
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

  // issue 27: "Undo only this" on a step: the confirmation shows the selection's closure (what
  // is added and why, what is kept) from the server's preview of it, then undoes exactly that.
  var only = document.getElementById("confirm-only");
  // why the closure added a step (amends._selection's "why"), in words for people
  var DEPENDS = {
    after: "it was set to run after",
    output: "it used the result of",
    resource: "it changed the same thing after",
    undo_after: "it must be undone before"
  };
  var chosen = null;
  function sentence(id) {
    var li = document.querySelector("li.planned[data-step-id='" + CSS.escape(id) + "']");
    return li ? li.dataset.sentence : "a step not shown here";  // ids: engineers' fold only
  }
  function fill(list, lines) {
    list.textContent = "";
    lines.forEach(function (line) {
      var li = document.createElement("li");
      li.textContent = line;
      list.appendChild(li);
    });
  }
  function askOnly(b) {
    var stepId = b.dataset.stepId;
    var url = "/sagas/" + encodeURIComponent(screen.dataset.sagaId) + "/preview?steps=" +
      encodeURIComponent(stepId);
    fetch(url, { credentials: "same-origin", headers: { "X-Amends-CSRF": csrf } })
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function (pair) {
        var plan = pair[1];
        if (pair[0] !== 200 || !plan.selection) {
          say("Error: " + (plan.detail || plan.error));
          return;
        }
        var sel = plan.selection;
        chosen = sel.steps;
        only.querySelector(".only-intro").textContent = "Undo only " + sentence(stepId) +
          " and what depends on it: " + sel.steps.length + " step" +
          (sel.steps.length === 1 ? "" : "s") + ", nothing else.";
        fill(only.querySelector(".only-steps"), plan.steps.map(function (p) {
          var verb = p.needs_review ? "Review" : (p.verb || "Nothing to undo");
          var will = p.predicted ? " — will be " + String(p.predicted).replace(/_/g, " ") : "";
          return verb + ": " + sentence(p.step_id) + will;
        }));
        only.querySelector(".only-added-box").hidden = sel.added.length === 0;
        // issue 26 item 2: in sentences; the closure's reason with ids stays in the JSON
        fill(only.querySelector(".only-added"), sel.added.map(function (a) {
          return sentence(a.step_id) + " — " + (DEPENDS[a.why] || DEPENDS.after) + " " +
            sentence(a.because_of);
        }));
        fill(only.querySelector(".only-kept"), sel.kept.length ? sel.kept.map(sentence) :
          ["none"]);
        document.getElementById("confirm-only-yes").textContent = "Yes: undo these " +
          sel.steps.length + " step" + (sel.steps.length === 1 ? "" : "s");
        only.dataset.stepId = stepId;
        only.showModal();
        document.getElementById("confirm-only-yes").focus();
      });
  }
  if (only) {
    document.querySelectorAll("button.undo-only").forEach(function (b) {
      b.addEventListener("click", function () { askOnly(b); });
    });
    document.getElementById("confirm-only-no").addEventListener("click", function () {
      only.close();
    });
    document.getElementById("confirm-only-yes").addEventListener("click", function () {
      if (only.open) { only.close(); }
      toProgress(chosen);
      start("?steps=" + encodeURIComponent(only.dataset.stepId));
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
      // the person confirmed undoing without the tools this server lacks (issue 23)
      start(yes.dataset.allowMissing === "true" ? "?allow_missing_tools=true" : "");
    });
  }
  bind(document);
})();
