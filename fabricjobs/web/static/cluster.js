// The nodes view (NODES and PS as cards: state, last beat, capacity per affinity, running tasks
// with their durations) and the plots of the whole cluster.
"use strict";
FJ.views.nodes = (function () {
  var el = FJ.el;
  function load() { return FJ.getJSON("/console/data/nodes"); }
  function capacity(c) {
    var pct = c.recommended ? Math.min(100, Math.round(100 * c.running / c.recommended)) : 0;
    var limit = c.recommended === c.absolute ? String(c.recommended) : c.recommended + " (max " + c.absolute + ")";
    return el("div", {class: "capacity"}, el("span", {text: c.affinity + ": " + c.running + " / " + limit}),
      el("div", {class: "bar"}, el("span", {class: pct >= 100 ? "full" : null, style: null, "data-pct": pct})));
  }
  function card(n) {
    var node = el("div", {class: "card node", "data-node": n.node},
      el("h2", null, n.node + " ", el("span", {class: "badge s-" + n.state, text: n.state})),
      FJ.kv([["Last beat", n.last_beat_s === null ? "never" : n.last_beat_s + " s ago"], ["DC", n.dc],
        ["Host", n.host + " (pid " + n.pid + ")"], ["Version", n.version], ["Started", FJ.when(n.started)],
        ["Running", String(n.running)]]),
      el("h2", {text: "Capacity"}), n.capacity.map(capacity),
      el("h2", {text: "Tasks"}), n.tasks.length ? FJ.table([
        ["Task", function (t) { return String(t.task); }, "num"],
        ["Job", function (t) {  // the job's parts as the server read them (a NAME or UID may hold '.')
          return t.job ? el("a", {href: FJ.jobHref(t.job.type, t.job.name, t.job.uid), class: "task-link", text: t.key}) : t.key;
        }, "wrap"],
        ["Running for", function (t) { return FJ.duration(t.elapsed_ms); }, "num"],
      ], n.tasks) : el("p", {class: "muted", text: "No task running."}));
    node.querySelectorAll(".bar > span").forEach(function (s) { s.style.width = s.dataset.pct + "%"; });
    return node;
  }
  function render(main, body) {
    main.replaceChildren(el("h1", {text: "Nodes"}), body.nodes.length ? el("div", {class: "grid", id: "nodes"}, body.nodes.map(card))
      : el("div", {class: "card empty", id: "empty"}, el("strong", {text: "No node has joined this cluster."}),
        "Start one with ", el("code", {text: "fabricjobs node"}), "."));
  }
  return {load: load, render: render};
})();

FJ.views.plots = (function () {
  var el = FJ.el;
  function load() { return FJ.getJSON("/console/data/plots"); }
  function render(main, body) {
    main.replaceChildren(el("h1", {text: "Plots"}),
      el("p", {class: "muted", text: "From the runs that ended in the last hour (" + body.runs_known + " runs" +
        (body.missed ? "; more ended in one interval than were read: at least that many" : "") + "). Queue depth is sampled by this web process " +
        "each interval and starts again when it restarts. A job's own durations are on its page."}),
      el("div", {class: "grid", id: "plots"}, body.plots.map(Plots.draw)));
  }
  return {load: load, render: render};
})();
