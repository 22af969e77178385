// Who is signed in, and is it this browser's own session? (issue 21.7, cookie tossing)
// Any page on another port of this host can set this host's cookies, so a session cookie alone
// never acts. The page that signed in was handed a page key, kept here in this origin's storage,
// which no other origin can read or write. Every state-changing request sends it
// (window.amendsCsrf, read by app.js); a page whose session this browser did not start says so
// instead of presenting it, and the server refuses its writes. No inline script (CSP).
"use strict";
(function () {
  var STORE = "amends.session";

  function meta(name) {
    var m = document.querySelector("meta[name='" + name + "']");
    return m ? m.getAttribute("content") : null;
  }

  var id = meta("amends-session");
  var fresh = meta("amends-key");
  if (id && fresh) {  // the sign-in answer: keep the key, then go on to the sagas
    localStorage.setItem(STORE, JSON.stringify({ id: id, key: fresh }));
    window.location.replace("/");
    return;
  }
  var mine = null;
  try {
    mine = JSON.parse(localStorage.getItem(STORE) || "null");
  } catch (e) {
    mine = null;
  }
  var key = id && mine && mine.id === id ? String(mine.key) : "";
  window.amendsCsrf = meta("amends-csrf") || key;
  var signout = document.querySelector("form.signout");
  if (signout) { signout.elements.csrf.value = key; }
  if (!id || key) { return; }

  // A session this page did not start: name it, show nothing of it, offer the way out (the
  // sign-in form itself stays: signing in replaces the session).
  var tenant = document.getElementById("who-tenant");
  var main = document.getElementById("main");
  var signingIn = document.querySelector("form[action='/login']") !== null;
  var box = document.createElement("section");
  box.id = "planted";
  box.className = "planted-box";
  box.setAttribute("role", "alert");
  var h = document.createElement("h1");
  h.textContent = "This is not your session";
  var p = document.createElement("p");
  p.textContent = "This browser carries a session of " +
    (tenant ? "tenant " + tenant.textContent : "another tenant") +
    " that was not started on this page: another site on this computer may have planted it. " +
    "Nothing here will act for it.";
  var actions = document.createElement("p");
  if (!signingIn) {
    var again = document.createElement("a");
    again.href = "/login";
    again.textContent = "Sign in with your own token";
    actions.append(again, " · ");
  }
  var out = document.createElement("button");
  out.type = "button";
  out.className = "link";
  out.textContent = "Forget this session";
  out.addEventListener("click", function () { if (signout) { signout.submit(); } });
  actions.append(out);
  box.append(h, p, actions);
  main.hidden = !signingIn;
  main.parentNode.insertBefore(box, main);
})();
