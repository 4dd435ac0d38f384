// The console's core: helpers, the router (#/jobs, #/job/T/N/U, #/history, #/calendars, #/nodes,
// #/plots), polling, and the calls that change things. Every value from the server reaches the
// page as text (textContent, attributes), never as HTML. The views are in jobs.js, job.js,
// history.js and cluster.js.
"use strict";
var FJ = (function () {
  function meta(name) { var m = document.querySelector('meta[name="' + name + '"]'); return m ? m.content : ""; }
  var csrf = meta("fj-csrf"), role = meta("fj-role");
  var interval = Math.max(200, 1000 * (parseFloat(meta("fj-interval")) || 2));
  var views = {}, current = null, timer = null, lastBody = null, generation = 0, keepBanner = false;

  // -- building elements ----------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
      if (k === "text") node.textContent = attrs[k];
      else if (k === "class") node.className = attrs[k];
      else if (k === "value") node.value = attrs[k];
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), attrs[k]);
      else node.setAttribute(k, attrs[k] === true ? "" : attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  function fill(node) {  // node's children replaced by the rest of the arguments (null ones left out, as el does)
    node.replaceChildren();
    for (var i = 1; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function badge(status, blocked) {
    var label = blocked && status === "WAITING" ? "BLOCKED" : status;
    return el("span", {class: "badge s-" + label, text: blocked && status !== "WAITING" ? status + " · blocked" : label});
  }
  function progress(text) {
    // JOBSTATUS's Progress ("75%", "" when the run reported none) as a bar with its percentage.
    // The width is set through the CSSOM, which the page's CSP allows (a style attribute it would not).
    var pct = parseFloat(text);
    if (!text || isNaN(pct)) return null;
    pct = Math.max(0, Math.min(100, Math.round(pct)));
    var fill = el("span");
    fill.style.width = pct + "%";
    return el("span", {class: "progress"},
      el("span", {class: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(pct),
        "aria-label": "progress"}, fill),
      el("span", {class: "pct", text: pct + "%"}));
  }
  function table(columns, rows, cls) {
    // columns: [label, function(row) -> content, cell class]; a phone shows each row as a card.
    return el("div", {class: "table-wrap"}, el("table", {class: "cards " + (cls || "")},
      el("thead", null, el("tr", null, columns.map(function (c) { return el("th", {text: c[0]}); }))),
      el("tbody", null, rows.map(function (r) {
        return el("tr", {"data-key": r.key || null}, columns.map(function (c) {
          return el("td", {"data-label": c[0], class: c[2] || null}, c[1](r));
        }));
      }))));
  }
  function kv(pairs) {
    return el("dl", {class: "kv"}, pairs.map(function (p) {
      return [el("dt", {text: p[0]}), el("dd", null, p[1] === null || p[1] === "" ? el("span", {class: "muted", text: "—"}) : p[1])];
    }));
  }
  function when(iso) {
    if (!iso) return "";
    var d = new Date(iso);
    if (isNaN(d)) return String(iso);  // "Ready to be executed", "Blocked by its parents"
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
      two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }
  function duration(ms) {
    if (ms === null || ms === undefined) return "";
    if (ms < 1000) return ms + " ms";
    var s = ms / 1000;
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }
  function jobHref(type, name, uid) {
    return "#/job/" + [type, name, uid].map(encodeURIComponent).join("/");
  }
  function apiPath(type, name, uid) {
    return "/api/v1/jobs/" + [type, name, uid].map(encodeURIComponent).join("/");
  }
  function query(values) {
    return Object.keys(values).filter(function (k) { return values[k] !== "" && values[k] !== null && values[k] !== undefined; })
      .map(function (k) { return k + "=" + encodeURIComponent(values[k]); }).join("&");
  }
  function decode(part) {
    // A part of the address as the console wrote it; one it did not write (a stray '%') as typed.
    try { return decodeURIComponent(part); } catch (e) { return part; }
  }

  // -- talking to the server ------------------------------------------------------------------
  function loggedOut() {
    // The session ended under the page: the login says so, and the page comes back after it.
    try { sessionStorage.setItem("fj-return", location.hash); } catch (e) { /* storage off: the jobs view then */ }
    location.href = "/login?ended=1";
  }
  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", cache: "no-cache"}).then(function (r) {
      if (r.status === 401) { loggedOut(); throw new Error("logged out"); }
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) {
          var err = new Error((body.error || r.status) + ": " + (body.message || ""));
          err.status = r.status;
          err.body = body;
          throw err;
        }
        return body;
      });
    });
  }
  // A change through the API (the page's CSRF token in a header): the banner says how it went,
  // then the view is read again. Resolves to the answer's body, or null if it was refused.
  function send(method, url, label, body) {
    var headers = {"X-CSRF-Token": csrf};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(url, {method: method, credentials: "same-origin", headers: headers,
                       body: body === undefined ? undefined : JSON.stringify(body)})
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (answer) {
          if (r.status === 401) { loggedOut(); return null; }
          if (!r.ok) { banner(label + " refused: " + (answer.error || r.status) + ": " + (answer.message || ""), "bad"); return null; }
          var first = Array.isArray(answer) ? answer[0] || {} : answer;
          banner(label + ": " + (first.status ? "now " + first.status : "done") + (first.notes ? " (" + first.notes + ")" : ""), "ok");
          return answer;
        });
      })
      .catch(function (e) { banner(label + " failed: " + e.message, "bad"); return null; })
      .then(function (answer) { rerender(); return answer; });
  }
  function post(url, label) { return send("POST", url, label); }
  function confirmThen(text, action) {
    var dialog = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    dialog.onclose = function () { if (dialog.returnValue === "ok") action(); };
    dialog.returnValue = "";
    dialog.showModal();
  }
  function banner(text, kind) {
    var b = document.getElementById("banner");
    b.hidden = !text;
    b.className = "banner " + (kind || "");
    b.textContent = text || "";
  }
  function status(text) { document.getElementById("status").textContent = text; }

  // -- routing and polling --------------------------------------------------------------------
  function route() {
    var back = null;
    try { back = sessionStorage.getItem("fj-return"); sessionStorage.removeItem("fj-return"); } catch (e) { back = null; }
    if (back && back !== location.hash && (!location.hash || location.hash === "#/" || location.hash === "#/jobs")) {
      location.replace(back);  // (the hashchange routes there; no history entry for the page it left)
      return;
    }
    var parts = location.hash.replace(/^#\/?/, "").split("/").map(decode);
    var name = views[parts[0]] ? parts[0] : "jobs";
    document.querySelectorAll("#nav a").forEach(function (a) {
      a.classList.toggle("active", a.dataset.view === (name === "job" ? "jobs" : name));
    });
    current = {view: views[name], args: parts.slice(1), state: {}};
    lastBody = null;
    if (keepBanner) keepBanner = false; else banner("");
    document.getElementById("main").replaceChildren(el("p", {class: "muted", text: "Loading…"}));
    refresh();
  }
  function refresh() {
    clearTimeout(timer);
    var mine = ++generation, view = current;
    view.view.load(view.args, view.state).then(function (body) {
      if (mine !== generation) return;
      var text = JSON.stringify(body);
      // (A view that put off drawing, not to redraw under the typing hand, returns false: the
      // body is drawn at a later refresh, even if it does not change meanwhile.)
      if (text !== lastBody && view.view.render(document.getElementById("main"), body, view.args, view.state) !== false) {
        lastBody = text;
      }
      status("updated " + new Date().toLocaleTimeString() + (body.error ? " · " + body.error : ""));
    }).catch(function (e) {
      if (mine !== generation) return;
      status("could not update: " + e.message);
      if (e.status === 400 && view.view.refused) {  // the view's own form asked it: shown beside the form
        lastBody = "";
        view.view.refused(document.getElementById("main"), e.body && e.body.message ? e.body.message : e.message);
      } else if (lastBody === null || e.status === 404) failed(e);  // nothing shown yet (or the job is gone): say why
    }).then(function () {
      if (mine === generation) timer = setTimeout(refresh, document.hidden ? interval * 5 : interval);
    });
  }
  function failed(e) {
    lastBody = "";
    var what = e.body && e.body.message ? e.body.message : e.message;
    document.getElementById("main").replaceChildren(el("div", {class: "card empty", id: "failed"},
      el("strong", {text: e.status === 404 ? "Not found" : "This page cannot be shown"}), el("p", {text: what}),
      el("a", {href: "#/jobs", text: "← Jobs", onclick: function (ev) { ev.preventDefault(); go("#/jobs"); }})));
  }
  function rerender() { lastBody = null; refresh(); }
  function go(hash, keep) {  // keep: the banner stays (what the button did, said on the page it leads to)
    if (location.hash === hash) { rerender(); return; }
    keepBanner = !!keep;
    location.hash = hash;
  }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
  window.addEventListener("hashchange", route);
  document.addEventListener("DOMContentLoaded", route);

  return {el: el, fill: fill, badge: badge, progress: progress, table: table, kv: kv, when: when, duration: duration, jobHref: jobHref,
    apiPath: apiPath, query: query, getJSON: getJSON, send: send, post: post, confirmThen: confirmThen, banner: banner,
    views: views, rerender: rerender, go: go, canChange: role === "operator" || role === "admin", isAdmin: role === "admin",
    role: role};
})();
