// The history search: ended jobs (archived, kept for K2JOB_ARCHIVING_TIME_HOUR) by type, part of
// the name or UID, owner, status and when they ended, newest first, a page at a time (each page
// looks at a bounded number of archived jobs, so a search far back goes on page by page: Older).
// And the calendars (CALENDARS; an admin creates and drops them: CREATECALENDAR, DROPCALENDAR).
"use strict";
FJ.views.history = (function () {
  var el = FJ.el;
  var search = {type: "", name: "", uid: "", owner: "", status: "", since: "", until: ""};
  var page = {cursor: "", before: []};
  var form = null;

  function utc(local) {  // a datetime-local value (the browser's own zone) as ISO UTC
    if (!local) return "";
    var d = new Date(local);
    return isNaN(d) ? "" : d.toISOString();
  }
  function load() {
    var values = Object.assign({}, search, {since: utc(search.since), until: utc(search.until), cursor: page.cursor, limit: 100});
    return FJ.getJSON("/console/data/history?" + FJ.query(values));
  }
  function searchForm(types) {
    function field(key, attrs) {
      return el("input", Object.assign({id: "history-" + key, name: key, "aria-label": key, value: search[key]}, attrs));
    }
    function select(key, values, first) {
      var s = el("select", {id: "history-" + key, name: key, "aria-label": key},
        el("option", {value: "", text: first}), values.map(function (v) { return el("option", {value: v, text: v}); }));
      s.value = search[key];
      return s;
    }
    var f = el("form", {class: "filters", id: "history-form", onsubmit: function (e) {
      e.preventDefault();
      Object.keys(search).forEach(function (k) { search[k] = f.elements[k].value.trim(); });
      page = {cursor: "", before: []};
      FJ.rerender();
    }},
      select("type", types, "every type"), field("name", {type: "search", placeholder: "part of the name"}),
      field("uid", {type: "search", placeholder: "part of the UID"}), field("owner", {type: "search", placeholder: "owner"}),
      select("status", ["PROCESSED", "FAILED", "TERMINATED"], "every end"),
      el("label", null, "ended after ", field("since", {type: "datetime-local", step: "1"})),
      el("label", null, "before ", field("until", {type: "datetime-local", step: "1"})),
      el("button", {type: "submit", id: "history-search", text: "Search"}));
    return f;
  }
  function results(body) {
    if (!body.jobs.length) {
      return el("div", {class: "card empty", id: "history-empty"},
        el("strong", {text: body.next_cursor ? "None on this page." : "No ended job matches."}),
        body.next_cursor ? "This page looked at as many ended jobs as a page may; Older goes on." :
          "Ended jobs are kept for the retention (K2JOB_ARCHIVING_TIME_HOUR).");
    }
    return FJ.table([
      ["Type", function (j) { return j.type; }],
      ["Name", function (j) { return el("a", {href: FJ.jobHref(j.type, j.name, j.uid), class: "job-link", text: j.name}); }, "wrap"],
      ["UID", function (j) { return j.uid; }, "wrap mono"],
      ["Status", function (j) { return FJ.badge(j.status, false); }],
      ["Ended", function (j) { return FJ.when(j.end_time); }],
      ["Started", function (j) { return FJ.when(j.start_time); }],
      ["Owner", function (j) { return j.owner; }],
      ["Node", function (j) { return j.node; }],
      ["Notes", function (j) { return j.notes; }, "wrap"],
    ], body.jobs, "history");
  }
  function pager(body) {
    return el("div", {class: "pager", id: "history-pager"},
      el("button", {type: "button", id: "history-newest", text: "← Newest", disabled: !page.cursor,
        onclick: function () { page = {cursor: "", before: []}; FJ.rerender(); }}),
      el("button", {type: "button", id: "history-older", text: "Older →", disabled: !body.next_cursor,
        onclick: function () { page.before.push(page.cursor); page.cursor = body.next_cursor; FJ.rerender(); }}),
      el("span", {class: "muted", id: "history-reached",
        text: "Searched back to " + FJ.when(body.reached) + (body.next_cursor ? "" : " (the oldest kept or asked for)")}));
  }
  function layout(main) {
    if (!main.contains(form)) {
      main.replaceChildren(el("h1", {text: "History"}), el("p", {class: "muted",
        text: "Ended jobs (PROCESSED, FAILED, TERMINATED), newest first. Live ones are under Jobs."}), form,
        el("div", {id: "history"}), el("div", {id: "history-pager-box"}));
    }
  }
  function render(main, body) {
    if (!form || form.partial) form = searchForm(body.types);
    layout(main);
    document.getElementById("history").replaceChildren(results(body));
    document.getElementById("history-pager-box").replaceChildren(pager(body));
  }
  function refused(main, message) {
    // The server refused this search (a window that ends before it starts, one beyond the
    // retention): the form stays, to be mended, and the search starts again from the newest.
    page = {cursor: "", before: []};
    if (!form) { form = searchForm(search.type ? [search.type] : []); form.partial = true; }
    layout(main);
    document.getElementById("history").replaceChildren(el("div", {class: "card empty", id: "history-refused"},
      el("strong", {text: "This search cannot be made"}), el("p", {text: message})));
    document.getElementById("history-pager-box").replaceChildren();
  }
  return {load: load, render: render, refused: refused};
})();

FJ.views.calendars = (function () {
  var el = FJ.el;
  function load() { return FJ.getJSON("/api/v1/calendars").then(function (list) { return {calendars: list}; }); }
  function path(name) { return "/api/v1/calendars/" + encodeURIComponent(name); }
  function createForm() {
    if (!FJ.isAdmin) return el("p", {class: "muted", text: "An admin creates and drops calendars."});
    var f = el("form", {class: "card", id: "calendar-form", onsubmit: function (e) {
      e.preventDefault();
      var name = f.elements.name.value.trim();
      var rules = f.elements.rules.value.split("\n").map(function (r) { return r.trim(); }).filter(Boolean);
      FJ.send("PUT", path(name), "CREATECALENDAR " + name, {exclude: rules}).then(function (made) {
        if (made) { f.reset(); }
      });
    }},
      el("h2", {text: "Create or replace a calendar"}),
      el("input", {id: "calendar-name", name: "name", "aria-label": "name", placeholder: "name (holidays)", required: true}),
      el("textarea", {id: "calendar-rules", name: "rules", rows: "3", "aria-label": "rules", required: true,
        placeholder: "one EXCLUDE rule a line: 2026-12-25, 2026-12-24..2026-12-31, or cron (* * * * sat,sun)"}),
      el("button", {type: "submit", id: "calendar-submit", text: "Save"}));
    return f;
  }
  function render(main, body) {
    var form = document.getElementById("calendar-form");
    var list = body.calendars.length ? FJ.table([
      ["Name", function (c) { return c.name; }, "mono"],
      ["Rules", function (c) { return c.rules; }, "wrap"],
      ["Live jobs", function (c) { return String(c.live_jobs); }, "num"],
      ["", function (c) {
        return FJ.isAdmin ? el("button", {type: "button", class: "act danger", "data-calendar": c.name, text: "Drop",
          onclick: function () { FJ.confirmThen("Drop calendar " + c.name + " (DROPCALENDAR)?", function () {
            FJ.send("DELETE", path(c.name), "DROPCALENDAR " + c.name); }); }}) : null;
      }],
    ], body.calendars.map(function (c) { return Object.assign({key: c.name}, c); }), "calendars")
      : el("p", {class: "muted", id: "no-calendars", text: "No calendar yet."});
    if (!form || !main.contains(form)) {
      main.replaceChildren(el("h1", {text: "Calendars"}), el("p", {class: "muted",
        text: "A job with CALENDAR='<name>' skips the fires its calendar excludes."}), createForm(), el("div", {id: "calendars"}));
    }
    document.getElementById("calendars").replaceChildren(list);
  }
  return {load: load, render: render};
})();
