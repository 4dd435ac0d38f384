// The jobs table: the live jobs a page at a time (key order, Next and First), filtered, with the
// counts of the live jobs by status as chips (capped: "10,000+"); and, for operators, the form
// that starts a job (STARTJOB through POST /api/v1/jobs), which then shows the job's page.
"use strict";
FJ.views.jobs = (function () {
  var STATUSES = ["IN_PROCESS", "WAITING", "BLOCKED", "SCHEDULED", "HELD", "STOPPING", "RESTART"];
  var filters = {status: "", type: "", name: "", node: "", q: ""};
  var page = {cursor: "", before: [], limit: "100"};  // this page's cursor, the ones of the pages before
  var el = FJ.el, form = null;

  function load() {
    var values = Object.assign({}, filters, {cursor: page.cursor, limit: page.limit});
    return FJ.getJSON("/console/data/jobs?" + FJ.query(values));
  }
  function first() { page.cursor = ""; page.before = []; }
  function options(select, values, firstLabel) {
    var keep = select.value;
    select.replaceChildren(el("option", {value: "", text: firstLabel}));
    values.forEach(function (v) { select.appendChild(el("option", {value: v, text: v})); });
    if (keep && values.indexOf(keep) < 0) select.appendChild(el("option", {value: keep, text: keep}));
    select.value = keep;
  }
  function filterForm() {
    function changed(key) { return function (e) { filters[key] = e.target.value; first(); FJ.rerender(); }; }
    function field(tag, key, attrs) {
      var f = el(tag, Object.assign({id: "filter-" + key, "aria-label": key, onchange: changed(key)}, attrs || {}));
      if (tag === "input") f.addEventListener("input", changed(key));
      f.value = filters[key];
      return f;
    }
    var statusSelect = field("select", "status");
    options(statusSelect, STATUSES, "every live status");
    statusSelect.value = filters.status;
    var size = el("select", {id: "page-size", "aria-label": "rows a page", onchange: function (e) {
      page.limit = e.target.value; first(); FJ.rerender(); }}, ["50", "100", "500", "1000"].map(function (n) {
      return el("option", {value: n, text: n + " a page"}); }));
    size.value = page.limit;
    return el("form", {class: "filters", onsubmit: function (e) { e.preventDefault(); }},
      statusSelect, field("select", "type"), field("input", "name", {type: "search", placeholder: "name"}),
      field("select", "node"), field("input", "q", {type: "search", placeholder: "text in name, UID, notes…"}), size);
  }
  function count(n, cap) { return n > cap ? cap.toLocaleString("en") + "+" : n.toLocaleString("en"); }
  function counts(body) {
    return el("div", {class: "counts"}, Object.keys(body.counts).sort().map(function (s) {
      return el("button", {class: "chip", type: "button", "data-status": s, text: s + " " + count(body.counts[s], body.cap),
        onclick: function () { filters.status = s; document.getElementById("filter-status").value = s; first(); FJ.rerender(); }});
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
      ["Next run", function (j) { return FJ.when(j.next_run); }],
      ["Priority", function (j) { return String(j.priority); }, "num"],
      ["Tries", function (j) { return String(j.tries); }, "num"],
      ["Notes", function (j) { return j.notes; }, "wrap"],
    ], jobs, "jobs");
  }
  function pager(body) {
    var prev = el("button", {type: "button", id: "page-first", text: "← First page", disabled: !page.cursor,
      onclick: function () { first(); FJ.rerender(); }});
    var next = el("button", {type: "button", id: "page-next", text: "Next page →", disabled: !body.next_cursor,
      onclick: function () { page.before.push(page.cursor); page.cursor = body.next_cursor; FJ.rerender(); }});
    var note = body.partial ? "Looked at 5,000 jobs without filling the page: Next goes on from there." :
      "Page " + (page.before.length + 1) + (body.next_cursor ? "" : " (the last)");
    return el("div", {class: "pager", id: "pager"}, prev, next, el("span", {class: "muted", text: note}));
  }
  function startForm(body) {
    if (!FJ.canChange) return null;
    function input(name, attrs) { return el("input", Object.assign({id: "start-" + name, name: name, "aria-label": name}, attrs || {})); }
    var type = el("select", {id: "start-type", name: "type", "aria-label": "type"},
      body.types.map(function (t) { return el("option", {value: t, text: t}); }));
    var f = el("form", {class: "start", id: "start-form", onsubmit: function (e) {
      e.preventDefault();
      var values = {type: type.value, name: f.elements.name.value.trim()};
      ["uid", "affinity", "exec_interval"].forEach(function (k) { if (f.elements[k].value.trim()) values[k] = f.elements[k].value.trim(); });
      if (f.elements.priority.value !== "") values.priority = parseInt(f.elements.priority.value, 10);
      if (f.elements.hold.checked) values.hold = true;
      if (f.elements.args.value.trim()) {
        try { values.args = JSON.parse(f.elements.args.value); }
        catch (err) { FJ.banner("ARGS is not valid JSON: " + err.message, "bad"); return; }
      }
      FJ.send("POST", "/api/v1/jobs", "STARTJOB " + values.name, values).then(function (made) {
        if (made) FJ.go(FJ.jobHref(made.type, made.name, made.uid), true);
      });
    }},
      el("div", {class: "fields"}, type, input("name", {placeholder: "NAME (Customer.userJob1)", required: true}),
        input("uid", {placeholder: "UID (new if empty)"}), input("exec_interval", {placeholder: "EXEC_INTERVAL (00:05:00, cron, a time)"}),
        input("affinity", {placeholder: "AFFINITY"}), input("priority", {type: "number", min: "0", max: "9", placeholder: "PRIORITY"}),
        el("label", null, input("hold", {type: "checkbox"}), " HOLD"),
        el("textarea", {id: "start-args", name: "args", rows: "2", placeholder: "ARGS: a JSON object", "aria-label": "args"})),
      el("button", {type: "submit", id: "start-submit", text: "Start"}));
    return el("details", {class: "card", id: "start"}, el("summary", {text: "Start a job"}), f);
  }
  function render(main, body) {
    if (!form) form = filterForm();
    options(form.querySelector("#filter-type"), body.types, "every type");
    options(form.querySelector("#filter-node"), body.nodes, "every node");
    var content, total = Object.keys(body.counts).reduce(function (n, s) { return n + body.counts[s]; }, 0);
    if (total === 0 && !body.jobs.length) {
      content = el("div", {class: "card empty", id: "empty"}, el("strong", {text: "No live job on this cluster."}),
        "Running, waiting, scheduled, held and blocked jobs appear here; ended ones are under History. Start one above, or from the shell, e.g. ",
        el("code", {text: "fabricjobs shell -e \"startjob user_job name='Customer.userJob3';\""}),
        body.nodes.length ? "" : el("p", {text: "No node has joined yet either: start one with fabricjobs node."}));
    } else if (!body.jobs.length && !body.partial) {
      content = el("div", {class: "card empty", id: "empty"}, el("strong", {text: "No job matches these filters."}),
        el("button", {type: "button", text: "Clear the filters", onclick: function () {
          Object.keys(filters).forEach(function (k) { filters[k] = ""; form.querySelector("#filter-" + k).value = ""; });
          first(); FJ.rerender(); }}));
    } else {
      content = rows(body.jobs);
    }
    if (!main.contains(form) || (FJ.canChange && !document.getElementById("start"))) {
      // (the filters, and the start form, stay in place while rows change)
      FJ.fill(main, el("h1", {text: "Jobs"}), startForm(body), form, el("div", {id: "counts"}), el("div", {id: "jobs"}),
        el("div", {id: "pager-box"}));
    }
    document.getElementById("counts").replaceChildren(counts(body));
    document.getElementById("jobs").replaceChildren(content);
    document.getElementById("pager-box").replaceChildren(pager(body));
  }
  function refused(main, message) {
    // The server refused this page's query (a filter too long, a cursor it cannot read): the
    // filters stay, to be mended; the page goes back to the first, whose cursor is always good.
    first();
    if (!form) form = filterForm();
    if (!main.contains(form)) {
      FJ.fill(main, el("h1", {text: "Jobs"}), form, el("div", {id: "counts"}), el("div", {id: "jobs"}), el("div", {id: "pager-box"}));
    }
    document.getElementById("jobs").replaceChildren(el("div", {class: "card empty", id: "refused"},
      el("strong", {text: "These filters cannot be used"}), el("p", {text: message})));
    document.getElementById("pager-box").replaceChildren();
  }
  return {load: load, render: render, refused: refused};
})();
