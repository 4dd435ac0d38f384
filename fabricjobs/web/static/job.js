// One job's page: its row (owner, requestor, calendar among it), arguments, output, notes,
// parents and children, running task, run history and logs, plots, and for operators and
// admins what the prompt can do to one job: Run now, Finish, Update (schedule, priority,
// affinity), Hold, Release, Stop, Restart, Resume and Kill, each confirmed first (an update is
// a form). The server refuses them to a viewer anyway (403). A job there is not says so.
"use strict";
FJ.views.job = (function () {
  var el = FJ.el;
  var LIVE_IDLE = {WAITING: true, SCHEDULED: true};

  function load(args) {
    var q = ["type", "name", "uid"].map(function (k, i) { return k + "=" + encodeURIComponent(args[i] || ""); }).join("&");
    return FJ.getJSON("/console/data/job?" + q);
  }
  function actions(job, task, state) {
    if (!FJ.canChange) return null;
    var path = FJ.apiPath(job.type, job.name, job.uid), key = job.type + "." + job.name + "." + job.uid;
    function button(id, label, question, url) {
      return el("button", {type: "button", class: "act" + (id === "kill" ? " danger" : ""), id: "action-" + id, text: label,
        onclick: function () { FJ.confirmThen(question + "\n" + key, function () { FJ.post(url, label + " " + key); }); }});
    }
    var live = !job.is_archived, buttons = [];
    if (live && job.status === "SCHEDULED") buttons.push(button("run", "Run now", "Run this job once now, its schedule unchanged (RUNJOB)?", path + "/run"));
    if (live && job.execution_interval && job.next_run !== "None: finishing (FINISHJOB)" && job.status !== "HELD") {
      buttons.push(button("finish", "Finish", "Let its run going on (or due) complete, then no more fires (FINISHJOB)?", path + "/finish"));
    }
    if (live && LIVE_IDLE[job.status]) {
      buttons.push(el("button", {type: "button", class: "act", id: "action-hold", text: "Hold",
        onclick: function () { FJ.confirmThen("Hold this job: it runs only once released (UPDATEJOB ... HOLD=true)?\n" + key,
          function () { FJ.send("PATCH", path, "Hold " + key, {hold: true}); }); }}));
    }
    if (live && job.status === "HELD") buttons.push(button("release", "Release", "Release this job and its held children (RELEASEJOB)?", path + "/release"));
    if (live) {
      buttons.push(el("button", {type: "button", class: "act", id: "action-update", text: "Update…",
        onclick: function () { state.editing = !state.editing; state.draft = null; FJ.rerender(); }}));
    }
    if (live) buttons.push(button("stop", "Stop", "Stop this job (STOPJOB)?", path + "/stop"));
    if (live && job.status !== "HELD") buttons.push(button("restart", "Restart", "Restart this job (RESTARTJOB)?", path + "/restart"));
    if (!live) buttons.push(button("resume", "Resume", "Resume this job (RESUMEJOB)?", path + "/resume"));
    if (task) {
      buttons.push(button("kill", "Kill", "Kill task " + task.task + " on node " + task.node + " at once (KILL)?",
        "/api/v1/nodes/" + encodeURIComponent(task.node) + "/tasks/" + task.task + "/kill"));
    }
    return el("div", {class: "actions", id: "actions"}, buttons, live && state.editing ? updateForm(job, path, key, state) : null);
  }
  function updateForm(job, path, key, state) {
    // UPDATEJOB of the three values an operator changes most; each one left as it is is not sent.
    function field(name, label, value, attrs) {
      return el("label", null, label + " ", el("input", Object.assign({id: "update-" + name, name: name, value: value}, attrs || {})));
    }
    var draft = state.draft || {exec_interval: job.execution_interval || "", priority: String(job.priority),
                                affinity: job.affinity === "ANY" ? "" : job.affinity};
    var f = el("form", {class: "update card", id: "update-form", onsubmit: function (e) {
      e.preventDefault();
      var body = {}, given = {exec_interval: job.execution_interval || "", priority: String(job.priority), affinity: job.affinity === "ANY" ? "" : job.affinity};
      ["exec_interval", "affinity"].forEach(function (k) { if (f.elements[k].value !== given[k]) body[k] = f.elements[k].value; });
      if (f.elements.priority.value !== given.priority) body.priority = parseInt(f.elements.priority.value, 10);
      if (!Object.keys(body).length) { FJ.banner("Nothing changed.", ""); return; }
      // What was typed stays in the form until the change is made: a refusal is mended, not typed again.
      state.draft = {exec_interval: f.elements.exec_interval.value, priority: f.elements.priority.value, affinity: f.elements.affinity.value};
      FJ.send("PATCH", path, "UPDATEJOB " + key, body).then(function (done) {
        if (done) { state.editing = false; state.draft = null; FJ.rerender(); }
      });
    }},
      field("exec_interval", "EXEC_INTERVAL", draft.exec_interval, {placeholder: "'' : a one-time job"}),
      field("priority", "PRIORITY", draft.priority, {type: "number", min: "0", max: "9", step: "1", required: true}),
      field("affinity", "AFFINITY", draft.affinity, {placeholder: "ANY"}),
      el("button", {type: "submit", id: "update-submit", text: "Save"}));
    return f;
  }
  function jobLink(j) {
    return el("li", null, el("a", {href: FJ.jobHref(j.type, j.name, j.uid), text: j.key}), " ",
      FJ.badge(j.status, j.blocked));
  }
  function details(job, task) {
    return el("div", {class: "card", id: "details"}, FJ.kv([
      ["Status", FJ.badge(job.status, job.blocked)], ["Progress", FJ.progress(job.progress)], ["Notes", job.notes], ["Node", job.node],
      ["Running task", task ? "task " + task.task + " on " + task.node + " for " + FJ.duration(task.elapsed_ms) : ""],
      ["Created", FJ.when(job.creation_time)], ["Started", FJ.when(job.start_time)], ["Ended", FJ.when(job.end_time)],
      ["Next run", FJ.when(job.next_run)], ["Schedule", job.execution_interval], ["Time zone", job.time_zone],
      ["Calendar", job.calendar], ["Affinity", job.affinity], ["Candidates", String(job.ownership_candidates_num)],
      ["Priority", String(job.priority)], ["Owner", job.owner], ["Requestor", job.requestor],
      ["Tries", String(job.tries)], ["Epoch", String(job.epoch)],
      ["Runs", job.runs + " (" + job.successes + " ok, " + job.failures + " failed, " + job.kills + " killed)"],
    ]));
  }
  function runs(body, state) {
    if (!body.runs.length) return el("p", {class: "muted", id: "runs", text: "No recorded run yet."});
    return el("div", {id: "runs"}, FJ.table([
      ["Run", function (r) { return String(r.run); }, "num"],
      ["Result", function (r) { return el("span", {class: "badge s-" + r.result, text: r.result}); }],
      ["Status", function (r) { return r.status; }],
      ["Node", function (r) { return r.node; }],
      ["Due", function (r) { return FJ.when(r.due); }],
      ["Start", function (r) { return FJ.when(r.start); }],
      ["End", function (r) { return FJ.when(r.end); }],
      ["Took", function (r) { return FJ.duration(r.duration_ms); }, "num"],
      ["Error / note", function (r) { return r.error || r.note; }, "wrap"],
      ["Log", function (r) {
        return el("button", {type: "button", text: "log", onclick: function () { showLog(body.job, r.run, state); }});
      }],
    ], body.runs));
  }
  function showLog(job, run, state) {
    FJ.getJSON(FJ.apiPath(job.type, job.name, job.uid) + "/runs/" + run + "/log").then(function (log) {
      state.log = log;
      FJ.rerender();
    }).catch(function (e) { FJ.banner("log of run " + run + ": " + e.message, "bad"); });
  }
  // The live log panel of a running job: its lines as they come (GET .../log?follow=true, NDJSON),
  // one stream per page, opened again every minute while the run goes on (a request is not held
  // longer: proxies cut idle ones), closed when the page is left.
  var following = null;
  var RUNNING = {IN_PROCESS: true, STOPPING: true, RESTART: true};
  function follow(job, state) {
    if (following && following.state === state) return;
    if (following) following.abort.abort();
    var mine = following = {state: state, abort: new AbortController()};
    state.live = {lines: [], ended: false, epoch: job.epoch};
    var url = FJ.apiPath(job.type, job.name, job.uid) + "/log?follow=true&timeout=55";
    fetch(url, {credentials: "same-origin", signal: mine.abort.signal}).then(function (r) {
      if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
      var reader = r.body.getReader(), decoder = new TextDecoder(), rest = "";
      function step(part) {
        if (following !== mine || !document.getElementById("live-log")) { mine.abort.abort(); return; }
        rest += decoder.decode(part.value || new Uint8Array(), {stream: !part.done});
        var lines = rest.split("\n");
        rest = part.done ? "" : lines.pop();
        lines.filter(Boolean).forEach(function (text) { liveLine(state, JSON.parse(text)); });
        if (part.done) return ended(job, state, mine);
        return reader.read().then(step);
      }
      return reader.read().then(step);
    }).catch(function (e) { if (following === mine) liveLine(state, {error: "Error", message: e.message}); });
  }
  function liveLine(state, item) {
    if (item.error === "WaitTimeout") { state.live.again = true; return; }  // a minute is up: open it again
    state.live.lines.push(item.line !== undefined ? item.line : item.error + ": " + item.message);
    var pre = document.getElementById("live-log");
    if (pre) { pre.textContent = state.live.lines.join("\n"); pre.scrollTop = pre.scrollHeight; }
  }
  function ended(job, state, mine) {
    if (following !== mine) return;
    following = null;
    if (state.live.again && document.getElementById("live-log")) { delete state.live; return follow(job, state); }
    state.live.ended = true;
    var note = document.getElementById("live-state");
    if (note) note.textContent = "The run has ended.";
  }
  function livePanel(job, state) {
    // The run followed has ended and another is going on (a recurring fire, a restart, a
    // takeover, a resume): follow that one.
    if (RUNNING[job.status] && (!state.live || (state.live.ended && state.live.epoch !== job.epoch))) follow(job, state);
    if (!state.live) return el("section", {id: "live"});
    return el("section", {id: "live"},
      el("h2", {text: "Live log"}),
      el("p", {class: "muted", id: "live-state", text: state.live.ended ? "The run has ended." : "Lines as they come (within about a second)."}),
      el("pre", {id: "live-log", text: state.live.lines.join("\n")}));
  }
  function render(main, body, args, state) {
    var job = body.job, log = state.log || body.last_log;
    if (state.editing && document.activeElement && document.getElementById("update-form") &&
        document.getElementById("update-form").contains(document.activeElement)) return false;  // not under the typing hand
    FJ.fill(main,
      el("p", null, el("a", {href: job.is_archived ? "#/history" : "#/jobs", text: job.is_archived ? "← History" : "← Jobs"})),
      el("h1", {id: "job-title"}, job.type + " · " + job.name + " · " + job.uid + " ", FJ.badge(job.status, job.blocked)),
      actions(job, body.task, state),
      livePanel(job, state),
      el("div", {class: "two"},
        el("section", null, el("h2", {text: "The job"}), details(job, body.task)),
        el("section", null,
          el("h2", {text: "Arguments"}), el("pre", {id: "arguments", text: job.arguments || "{}"}),
          el("h2", {text: "Output"}), job.output ? el("pre", {id: "output", text: job.output}) : el("p", {class: "muted", text: "No output."}),
          el("h2", {text: "Dependencies"}),
          el("div", {class: "card"},
            el("strong", {text: "Parents"}), body.parents.length ? el("ul", {id: "parents"}, body.parents.map(jobLink)) : el("p", {class: "muted", text: "None."}),
            el("strong", {text: "Children waiting for it"}), body.children.length ? el("ul", {id: "children"}, body.children.map(jobLink)) : el("p", {class: "muted", text: body.children_cut ? "None among the blocked jobs looked at." : "None."}),
            body.children_cut ? el("p", {class: "muted", id: "children-cut", text: "The cluster has more blocked jobs than a page looks at: there may be more children."}) : null))),
      el("h2", {text: "Runs"}), runs(body, state),
      el("h2", {text: log ? "Log of run " + log.run : "Log"}),
      el("div", {id: "log-section"}, log ? [el("p", {class: "mono", text: log.summary}), el("pre", {id: "log", text: log.log || "(no log lines)"})]
          : el("p", {class: "muted", text: "No run has ended yet."})),
      el("h2", {text: "Plots"}), el("div", {class: "grid", id: "job-plots"}, body.plots.map(Plots.draw)));
  }
  return {load: load, render: render};
})();
