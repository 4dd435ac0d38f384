// The console's core: helpers, the router (#/jobs, #/job/T/N/U, #/nodes, #/plots), polling,
// actions, and the jobs table. Every value from the server reaches the page as text
// (textContent, attributes), never as HTML.
"use strict";
var FJ = (function () {
  function meta(name) { var m = document.querySelector('meta[name="' + name + '"]'); return m ? m.content : ""; }
  var csrf = meta("fj-csrf"), role = meta("fj-role");
  var interval = Math.max(200, 1000 * (parseFloat(meta("fj-interval")) || 2));
  var views = {}, current = null, timer = null, lastBody = null, generation = 0;

  // -- building elements ----------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) continue;
      if (k === "text") node.textContent = attrs[k];
      else if (k === "class") node.className = attrs[k];
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
        return el("tr", null, columns.map(function (c) {
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

  // -- talking to the server ------------------------------------------------------------------
  function getJSON(url) {
    return fetch(url, {credentials: "same-origin", cache: "no-cache"}).then(function (r) {
      if (r.status === 401) { location.href = "/login"; throw new Error("logged out"); }
      return r.json().then(function (body) {
        if (!r.ok) throw new Error((body.error || r.status) + ": " + (body.message || ""));
        return body;
      });
    });
  }
  function post(url, label) {
    return fetch(url, {method: "POST", credentials: "same-origin", headers: {"X-CSRF-Token": csrf}})
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (body) {
          if (r.status === 401) { location.href = "/login"; return; }
          if (!r.ok) return banner(label + " refused: " + (body.error || r.status) + ": " + (body.message || ""), "bad");
          banner(label + ": " + (body.status ? "now " + body.status : "sent") + (body.notes ? " (" + body.notes + ")" : ""), "ok");
        });
      })
      .catch(function (e) { banner(label + " failed: " + e.message, "bad"); })
      .then(function () { refresh(); });
  }
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
    var parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    var name = views[parts[0]] ? parts[0] : "jobs";
    document.querySelectorAll("#nav a").forEach(function (a) {
      a.classList.toggle("active", a.dataset.view === (name === "job" ? "jobs" : name));
    });
    current = {view: views[name], args: parts.slice(1), state: {}};
    lastBody = null;
    banner("");
    document.getElementById("main").replaceChildren(el("p", {class: "muted", text: "Loading…"}));
    refresh();
  }
  function refresh() {
    clearTimeout(timer);
    var mine = ++generation, view = current;
    view.view.load(view.args, view.state).then(function (body) {
      if (mine !== generation) return;
      var text = JSON.stringify(body);
      if (text !== lastBody) {
        lastBody = text;
        view.view.render(document.getElementById("main"), body, view.args, view.state);
      }
      status("updated " + new Date().toLocaleTimeString() + (body.error ? " · " + body.error : ""));
    }).catch(function (e) {
      if (mine === generation) status("could not update: " + e.message);
    }).then(function () {
      if (mine === generation) timer = setTimeout(refresh, document.hidden ? interval * 5 : interval);
    });
  }
  function rerender() { lastBody = null; refresh(); }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
  window.addEventListener("hashchange", route);
  document.addEventListener("DOMContentLoaded", route);

  return {el: el, badge: badge, progress: progress, table: table, kv: kv, when: when, duration: duration, jobHref: jobHref,
    apiPath: apiPath, getJSON: getJSON, post: post, confirmThen: confirmThen, banner: banner, views: views,
    rerender: rerender, canChange: role === "operator" || role === "admin", role: role};
})();

// -- the jobs table -----------------------------------------------------------------------------
FJ.views.jobs = (function () {
  var STATUSES = ["IN_PROCESS", "WAITING", "BLOCKED", "SCHEDULED", "STOPPING", "RESTART", "FINISHED",
    "PROCESSED", "FAILED", "TERMINATED"];
  var filters = {status: "", type: "", name: "", node: "", q: ""};
  var el = FJ.el, form = null;

  function load() {
    var query = Object.keys(filters).filter(function (k) { return filters[k]; })
      .map(function (k) { return k + "=" + encodeURIComponent(filters[k]); }).join("&");
    return FJ.getJSON("/console/data/jobs" + (query ? "?" + query : ""));
  }
  function options(select, values, first) {
    var keep = select.value;
    select.replaceChildren(el("option", {value: "", text: first}));
    values.forEach(function (v) { select.appendChild(el("option", {value: v, text: v})); });
    if (keep && values.indexOf(keep) < 0) select.appendChild(el("option", {value: keep, text: keep}));
    select.value = keep;
  }
  function filterForm() {
    function changed(key) { return function (e) { filters[key] = e.target.value; FJ.rerender(); }; }
    function field(tag, key, attrs) {
      var f = el(tag, Object.assign({id: "filter-" + key, "aria-label": key, onchange: changed(key)}, attrs || {}));
      if (tag === "input") f.addEventListener("input", changed(key));
      f.value = filters[key];
      return f;
    }
    var statusSelect = field("select", "status");
    options(statusSelect, STATUSES, "every status");
    statusSelect.value = filters.status;
    return el("form", {class: "filters", onsubmit: function (e) { e.preventDefault(); }},
      statusSelect, field("select", "type"), field("input", "name", {type: "search", placeholder: "name"}),
      field("select", "node"), field("input", "q", {type: "search", placeholder: "text in name, UID, notes…"}));
  }
  function counts(body) {
    return el("div", {class: "counts"}, Object.keys(body.counts).sort().map(function (s) {
      return el("button", {class: "chip", type: "button", text: s + " " + body.counts[s],
        onclick: function () { filters.status = s; document.getElementById("filter-status").value = s; FJ.rerender(); }});
    }));
  }
  function rows(jobs) {
    return FJ.table([
      ["Type", function (j) { return j.type; }],
      ["Name", function (j) { return el("a", {href: FJ.jobHref(j.type, j.name, j.uid), class: "job-link", text: j.name}); }, "wrap"],
      ["UID", function (j) { return j.uid; }, "wrap mono"],
      ["Status", function (j) { return [FJ.badge(j.status, j.blocked), FJ.progress(j.progress)]; }],
      ["Node", function (j) { return j.node; }],
      ["Started", function (j) { return FJ.when(j.start_time); }],
      ["Ended / next", function (j) { return j.is_archived ? FJ.when(j.end_time) : FJ.when(j.next_run); }],
      ["Tries", function (j) { return String(j.tries); }, "num"],
      ["Notes", function (j) { return j.notes; }, "wrap"],
    ], jobs, "jobs");
  }
  function render(main, body) {
    if (!form) form = filterForm();
    options(form.querySelector("#filter-type"), body.types, "every type");
    options(form.querySelector("#filter-node"), body.nodes, "every node");
    var content;
    if (body.total === 0) {
      content = el("div", {class: "card empty", id: "empty"}, el("strong", {text: "No jobs on this cluster yet."}),
        "Running, waiting, scheduled and blocked jobs appear here, and the last hour's finished ones. Start one from the shell, e.g. ",
        el("code", {text: "fabricjobs shell -e \"startjob user_job name='Customer.userJob3';\""}),
        body.nodes.length ? "" : el("p", {text: "No node has joined yet either: start one with fabricjobs node."}));
    } else if (body.matched === 0) {
      content = el("div", {class: "card empty", id: "empty"}, el("strong", {text: "No job matches these filters."}),
        el("button", {type: "button", text: "Clear the filters", onclick: function () {
          Object.keys(filters).forEach(function (k) { filters[k] = ""; form.querySelector("#filter-" + k).value = ""; });
          FJ.rerender(); }}));
    } else {
      content = [rows(body.jobs)];
      if (body.matched > body.jobs.length) {
        content.push(el("p", {class: "muted", text: "Showing " + body.jobs.length + " of " + body.matched + ": narrow the filters to see the rest."}));
      }
    }
    if (!main.contains(form)) {  // the filters stay in place (and keep focus) while rows change
      main.replaceChildren(el("h1", {text: "Jobs"}), form, el("div", {id: "counts"}), el("div", {id: "jobs"}));
    }
    document.getElementById("counts").replaceChildren(counts(body));
    document.getElementById("jobs").replaceChildren.apply(document.getElementById("jobs"), [].concat(content));
  }
  return {load: load, render: render};
})();
