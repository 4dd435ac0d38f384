// A link such as /login#token=fjt_... (what ./scripts/run prints) fills the form in; the
// fragment never reaches a server, and it is removed from the address bar at once. It is not
// submitted: a link from any site must not log this browser in under someone else's token (a
// login CSRF), so the user sees the form and presses "Log in".
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var note = document.getElementById("message");
  if (/[?&]ended=1/.test(location.search) && note.hidden) {  // the console sent this browser here
    note.textContent = "Your session ended (logged out elsewhere, or its token was revoked or has expired): " +
      "log in again to go back to the page you were on.";
    note.className = "notice";
    note.hidden = false;
  }
  var match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  history.replaceState(null, "", location.pathname);
  document.getElementById("token").value = decodeURIComponent(match[1]);
  note.textContent = "A link filled in a token: press Log in to use it.";
  note.className = "notice";
  note.hidden = false;
  document.getElementById("login").focus();
});
