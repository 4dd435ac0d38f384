// A link such as /login#token=fjt_... (what ./scripts/run prints) fills the form in; the
// fragment never reaches a server, and it is removed from the address bar at once. It is not
// submitted: a link from any site must not log this browser in under someone else's token (a
// login CSRF), so the user sees the form and presses "Log in".
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  history.replaceState(null, "", location.pathname);
  document.getElementById("token").value = decodeURIComponent(match[1]);
  var note = document.getElementById("message");
  note.textContent = "A link filled in a token: press Log in to use it.";
  note.className = "notice";
  note.hidden = false;
  document.getElementById("login").focus();
});
