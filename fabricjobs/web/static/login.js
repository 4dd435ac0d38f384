// A link such as /login#token=fjt_... (what ./scripts/run prints) fills the form and logs in;
// the fragment never reaches a server, and it is removed from the address bar at once.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  history.replaceState(null, "", location.pathname);
  document.getElementById("token").value = decodeURIComponent(match[1]);
  document.getElementById("login-form").submit();
});
