// Plots as SVG, drawn from the numbers the server computed (fabricjobs/web/plots.py): stacked
// bars over time, lines of points over time, and a histogram. No library: a plot is a <figure>
// with a title, an <svg> (axes, grid, marks, a <title> on each mark) and a legend.
"use strict";
var Plots = (function () {
  var NS = "http://www.w3.org/2000/svg", W = 440, H = 200, L = 44, R = 10, T = 10, B = 26;
  var COLOURS = {OK: "#2e7d32", ERROR: "#c62828", KILLED: "#8e0000", STOPPED: "#546e7a", RESTARTED: "#ef6c00",
    RELEASED: "#5c6bc0", LOST: "#6a1b9a", INTERRUPTED: "#8d6e63", SKIPPED: "#b0bec5",
    waiting: "#6a1b9a", blocked: "#ef6c00", running: "#1565c0"};
  var PALETTE = ["#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#c62828", "#5d4037", "#455a64"];

  function svg(tag, attrs, text) {
    var node = document.createElementNS(NS, tag);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function colour(name, i) { return COLOURS[name] || PALETTE[i % PALETTE.length]; }
  function nice(max) {  // a round upper bound for the y axis (small ones: whole ticks)
    if (max <= 4) return 4;
    if (max <= 0) return 1;
    var step = Math.pow(10, Math.floor(Math.log10(max)));
    var m = [1, 2, 4, 8, 10].find(function (f) { return f * step >= max; });  // quarters stay round
    return m * step;
  }
  function clock(ms) { return new Date(ms).toTimeString().slice(0, 5); }
  function clockSeconds(ms) { return new Date(ms).toTimeString().slice(0, 8); }
  function label(v, unit) {
    if (unit === "ms" && Math.abs(v) >= 1000) return (v / 1000).toFixed(v >= 10000 ? 0 : 1) + " s";
    return String(Math.round(v * 10) / 10);
  }
  function frame(g, ymin, ymax, unit) {
    for (var i = 0; i <= 4; i++) {
      var v = ymin + (ymax - ymin) * i / 4, y = H - B - (H - B - T) * i / 4;
      g.appendChild(svg("line", {class: "gridline", x1: L, x2: W - R, y1: y, y2: y}));
      g.appendChild(svg("text", {x: L - 4, y: y + 3, "text-anchor": "end"}, label(v, unit)));
    }
    g.appendChild(svg("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
    g.appendChild(svg("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  }
  function xLabels(g, values, x, text) {
    var every = Math.max(1, Math.ceil(values.length / 6));
    values.forEach(function (v, i) {
      if (i % every !== 0) return;
      var at = x(v, i), anchor = at > W - R - 24 ? "end" : at < L + 24 ? "start" : "middle";
      g.appendChild(svg("text", {x: at, y: H - B + 14, "text-anchor": anchor}, text(v)));
    });
  }

  function bars(g, p) {
    var n = p.x.length, totals = p.x.map(function (_, i) {
      return p.series.reduce(function (s, se) { return s + se.values[i]; }, 0);
    });
    var ymax = nice(Math.max.apply(null, totals.concat([1]))), bw = (W - L - R) / n, drawn = 0;
    frame(g, 0, ymax, p.unit);
    p.x.forEach(function (t, i) {
      var base = H - B;
      p.series.forEach(function (se, s) {
        var v = se.values[i];
        if (!v) return;
        var h = (H - B - T) * v / ymax;
        var r = svg("rect", {class: "mark", x: L + i * bw + 1, y: base - h, width: Math.max(1, bw - 2), height: h, fill: colour(se.name, s)});
        r.appendChild(svg("title", {}, clock(t) + " " + se.name + ": " + v));
        g.appendChild(r);
        base -= h;
        drawn++;
      });
    });
    xLabels(g, p.x, function (_, i) { return L + (i + 0.5) * bw; }, clock);
    return drawn;
  }
  function lines(g, p) {
    var all = [].concat.apply([], p.series.map(function (s) { return s.points; }));
    if (!all.length) return 0;
    var xs = all.map(function (q) { return q[0]; }), ys = all.map(function (q) { return q[1]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var ymin = Math.min(0, Math.min.apply(null, ys)), ymax = nice(Math.max.apply(null, ys.concat([1])));
    if (x1 === x0) { x0 -= 30000; x1 += 30000; }
    function x(t) { return L + (W - L - R) * (t - x0) / (x1 - x0); }
    function y(v) { return H - B - (H - B - T) * (v - ymin) / (ymax - ymin); }
    frame(g, ymin, ymax, p.unit);
    var drawn = 0;
    p.series.forEach(function (se, s) {
      var c = colour(se.name, s);
      if (se.points.length > 1 && !p.dots) {
        g.appendChild(svg("polyline", {fill: "none", stroke: c, "stroke-width": 1.6,
          points: se.points.map(function (q) { return x(q[0]).toFixed(1) + "," + y(q[1]).toFixed(1); }).join(" ")}));
      }
      se.points.forEach(function (q) {
        var dot = svg("circle", {class: "mark", cx: x(q[0]), cy: y(q[1]), r: p.dots || se.points.length < 3 ? 3 : 1.5, fill: c});
        dot.appendChild(svg("title", {}, new Date(q[0]).toLocaleTimeString() + " " + se.name + ": " + label(q[1], p.unit)));
        g.appendChild(dot);
        drawn++;
      });
    });
    var ticks = [0, 1, 2, 3, 4].map(function (i) { return x0 + (x1 - x0) * i / 4; });
    xLabels(g, ticks, x, x1 - x0 < 600000 ? clockSeconds : clock);
    return drawn;
  }
  function histogram(g, p) {
    if (!p.counts.length) return 0;
    var ymax = nice(Math.max.apply(null, p.counts)), bw = (W - L - R) / p.counts.length;
    frame(g, 0, ymax, "runs");
    p.counts.forEach(function (c, i) {
      if (!c) return;
      var h = (H - B - T) * c / ymax;
      var r = svg("rect", {class: "mark", x: L + i * bw + 1, y: H - B - h, width: Math.max(1, bw - 2), height: h, fill: "#1565c0"});
      r.appendChild(svg("title", {}, label(p.edges[i], p.unit) + "–" + label(p.edges[i + 1], p.unit) + " " + p.unit + ": " + c + " runs"));
      g.appendChild(r);
    });
    xLabels(g, p.edges.slice(0, -1), function (_, i) { return L + (i + 0.5) * bw; }, function (v) { return label(v, p.unit); });
    return p.counts.reduce(function (a, b) { return a + b; }, 0);
  }

  function draw(p) {
    var figure = FJ.el("figure", {class: "plot", "data-kind": p.kind},
      FJ.el("figcaption", null, p.title + " ", FJ.el("span", {class: "muted", text: "(" + p.unit + ")"})));
    var root = svg("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": p.title});
    var drawn = {bars: bars, lines: lines, histogram: histogram}[p.kind](root, p);
    figure.setAttribute("data-marks", String(drawn));
    if (!drawn) {
      figure.appendChild(FJ.el("p", {class: "muted", text: p.empty}));
      return figure;
    }
    figure.appendChild(root);
    if (p.series && p.series.length) {
      figure.appendChild(FJ.el("div", {class: "legend"}, p.series.map(function (se, s) {
        var swatch = FJ.el("i");
        swatch.style.background = colour(se.name, s);
        return FJ.el("span", null, swatch, se.name);
      })));
    }
    return figure;
  }
  return {draw: draw};
})();
