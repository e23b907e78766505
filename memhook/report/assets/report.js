/* memhook report: draws the page's data (the JSON in #report-data, written by
 * memhook/report/page.py) with Apache ECharts, inlined beside this file.
 *
 * When every chart has drawn, <html> gets data-render="done" (and
 * data-charts: how many); an error anywhere sets data-render="error" and
 * data-render-error, and says so on the page.  The tests read these marks
 * from a headless browser. */
(function () {
  "use strict";
  var html = document.documentElement;

  function fail(message) {
    html.setAttribute("data-render", "error");
    html.setAttribute("data-render-error", String(message));
    var box = document.getElementById("error");
    if (box) {
      box.textContent = "This report could not be drawn: " + message;
      box.hidden = false;
    }
  }
  window.addEventListener("error", function (ev) { fail(ev.message || "script error"); });

  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function human(n) {
    n = Number(n) || 0;
    var sign = n < 0 ? "-" : "";
    n = Math.abs(n);
    var u = 0;
    while (n >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
    // As the trace summary writes sizes (memhook/tracing/ledger.py human_size).
    return sign + (u === 0 || n >= 100 ? n.toFixed(0) : String(Number(n.toPrecision(3)))) + " " +
      UNITS[u];
  }
  // Times are in seconds from the earliest start; shown in the unit that suits the span.
  var timeUnit = {scale: 1, name: "s"};
  function chooseTimeUnit(span) {
    timeUnit = span >= 1 ? {scale: 1, name: "s"} : span >= 1e-3 ? {scale: 1e3, name: "ms"}
      : {scale: 1e6, name: "\u00b5s"};
  }
  function seconds(s) { return scaled((Number(s) || 0) * timeUnit.scale); }
  // The charts' x values are in timeUnit: ECharts places a mark line at a
  // tiny value (0.0003) at 0, so times are never plotted in seconds below 1 s.
  function scaled(v) {
    var a = Math.abs(v);
    return (a >= 100 || a === 0 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2)) + " " +
      timeUnit.name;
  }
  // A y-axis step of a round binary size (1, 2 or 5 times a power of two
  // bytes), about five to a chart.
  function byteStep(peak) {
    if (!(peak > 0)) return undefined;
    var unit = Math.pow(2, Math.floor(Math.log2(peak / 5)));
    var best = unit;
    [1, 2, 4, 8].forEach(function (m) { if (peak / (unit * m) >= 3) best = unit * m; });
    return best;
  }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // One colour per library, the same in every lane.
  var PALETTE = ["#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272",
                 "#fc8452", "#9a60b4", "#ea7ccc", "#2f4554", "#c4ccd3", "#d48265"];
  function libraryColor(i) { return PALETTE[i % PALETTE.length]; }

  var data = JSON.parse(document.getElementById("report-data").textContent);
  var charts = [];
  var drawn = 0;
  function track(chart) {
    var seen = false;
    charts.push(chart);
    chart.on("finished", function () {
      if (seen) return;
      seen = true;
      drawn++;
      if (drawn === charts.length && html.getAttribute("data-render") !== "error") {
        html.setAttribute("data-charts", String(drawn));
        html.setAttribute("data-render", "done");
      }
    });
  }
  window.addEventListener("resize", function () { charts.forEach(function (c) { c.resize(); }); });

  // ------------------------------------------------------------- header

  function header() {
    document.getElementById("summary").textContent =
      data.events.toLocaleString() + " events from " + data.tracks.length +
      (data.tracks.length === 1 ? " trace" : " traces") + ": " + data.inputs.join(", ");
    var notes = document.getElementById("notes");
    data.notes.forEach(function (n) { notes.appendChild(el("li", {}, n)); });
    notes.hidden = data.notes.length === 0;
  }

  // ---------------------------------------------- live bytes, per lane

  function lanes() {
    var box = document.getElementById("lanes");
    var tmax = 0;
    data.lanes.forEach(function (lane) {
      lane.points.forEach(function (p) { tmax = Math.max(tmax, p[0]); });
      lane.ooms.forEach(function (o) { tmax = Math.max(tmax, o.t); });
    });
    chooseTimeUnit(tmax);
    if (data.lanes.length === 0) {
      box.appendChild(el("p", {"class": "empty"},
                         "No device memory was allocated in these traces."));
      return;
    }
    peaks();
    var height = data.lanes.length > 8 ? 180 : 260;
    var group = [];
    data.lanes.forEach(function (lane, n) {
      var title = lane.label + " \u2014 " + lane.device + ": peak " + lane.peak_text +
        (lane.peak ? " at " + seconds(lane.peak_s) : "") +
        (lane.ooms.length ? " \u2014 out of memory at " + seconds(lane.ooms[0].t) : "");
      var section = el("section", {"class": "lane" + (lane.ooms.length ? " oom" : "")});
      section.appendChild(el("h3", {}, title));
      var div = el("div", {"class": "chart live", id: "lane-" + n,
                           style: "height: " + height + "px"});
      section.appendChild(div);
      box.appendChild(section);
      var chart = echarts.init(div, null, {renderer: "canvas"});
      track(chart);
      var series = lane.libs.map(function (lib, j) {
        return {
          name: data.libraries[lib], type: "line", stack: "live", step: "end",
          symbol: "none", lineStyle: {width: 0.6}, areaStyle: {opacity: 0.85},
          color: libraryColor(lib), emphasis: {focus: "series"},
          data: lane.points.map(function (p) { return [p[0] * timeUnit.scale, p[1 + j]]; })
        };
      });
      if (series.length === 0) {
        series.push({name: "(nothing live)", type: "line", data: [], symbol: "none"});
      }
      if (lane.ooms.length) {
        // On a series of its own: a stacked series would place the line by its stack.
        series.push({
          name: "out of memory", type: "scatter", color: "#d00", symbolSize: 9, symbol: "triangle",
          data: lane.ooms.map(function (o) { return [o.t * timeUnit.scale, 0]; }),
          tooltip: {show: false},
          markLine: {
            symbol: "none", animation: false, lineStyle: {color: "#d00", width: 2, type: "solid"},
            label: {formatter: "{b}", color: "#d00", fontWeight: "bold", position: "insideEndTop"},
            data: lane.ooms.map(function (o) {
              return {xAxis: o.t * timeUnit.scale,
                      name: "OOM: " + o.function + " of " + o.size_text};
            })
          }
        });
      }
      chart.setOption({
        animation: false,
        grid: {left: 78, right: 24, top: 34, bottom: 52},
        legend: {type: "scroll", top: 2, left: 10, right: 10},
        tooltip: {
          trigger: "axis", confine: true,
          formatter: function (params) {
            var rows = params.filter(function (p) { return p.seriesType === "line"; });
            if (!rows.length) return "";
            var total = 0;
            var text = rows.map(function (p) {
              total += p.value[1];
              return p.marker + echarts.format.encodeHTML(p.seriesName) + ": " + human(p.value[1]);
            }).reverse().join("<br>");
            return "<b>" + scaled(rows[0].value[0]) + ": " + human(total) + "</b><br>" + text;
          },
          axisPointer: {label: {formatter: function (p) {
            return p.axisDimension === "x" ? scaled(p.value) : human(p.value);
          }}}
        },
        xAxis: {type: "value", min: 0, max: tmax * timeUnit.scale || 1,
                axisLabel: {formatter: function (v) { return scaled(v); }}},
        yAxis: {type: "value", interval: byteStep(lane.peak),
                axisLabel: {formatter: function (v) { return human(v); }}},
        dataZoom: [{type: "inside", filterMode: "none"},
                   {type: "slider", height: 16, bottom: 6, filterMode: "none"}],
        series: series
      });
      group.push(chart);
    });
    if (group.length > 1) echarts.connect(group);
  }

  // One row a lane: its peak, when, and which lane peaked first.
  function peaks() {
    if (data.lanes.length < 2) return;
    var first = null;
    data.lanes.forEach(function (lane) {
      if (lane.peak > 0 && lane.device.indexOf("cuda") === 0 &&
          (first === null || lane.peak_s < first.peak_s)) first = lane;
    });
    var t = el("table", {id: "peaks"});
    var head = el("tr");
    ["rank", "device", "peak", "at", "out of memory"].forEach(function (h) {
      head.appendChild(el("th", {}, h));
    });
    t.appendChild(head);
    data.lanes.forEach(function (lane) {
      var tr = el("tr");
      tr.appendChild(el("td", {}, lane.label));
      tr.appendChild(el("td", {}, lane.device));
      tr.appendChild(el("td", {"class": "num"}, lane.peak_text));
      tr.appendChild(el("td", {"class": "num"}, lane.peak ? seconds(lane.peak_s) +
        (lane === first ? " (first to peak)" : "") : ""));
      tr.appendChild(el("td", {}, lane.ooms.length ? "at " + seconds(lane.ooms[0].t) +
        (lane.ooms.length > 1 ? " and " + (lane.ooms.length - 1) + " more" : "") : ""));
      t.appendChild(tr);
    });
    document.getElementById("lanes").appendChild(t);
  }

  // ------------------------------------------------------- flame graph

  var KIND_COLORS = {
    root: function () { return "#b0b0b0"; },
    rank: function () { return "#8a9bb5"; },
    api: function () { return "#d9534f"; },
    py: function (h) { return "hsl(" + (25 + h % 30) + ", 85%, " + (58 + h % 14) + "%)"; },
    "native": function (h) { return "hsl(" + (195 + h % 30) + ", 55%, " + (58 + h % 14) + "%)"; }
  };
  function hash(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return Math.abs(h);
  }
  function shortName(node) {
    if (node.k === "py") {  // "function (/a/b/file.py:12)" -> "function (file.py:12)"
      return node.n.replace(/\(([^()]*\/)([^/()]*)\)$/, "($2)");
    }
    return node.n;
  }

  var flameChart = null;
  var flameView = 0;
  var flameStack = [];
  var flameSearch = "";

  function matches(node) {
    return flameSearch !== "" && node.n.toLowerCase().indexOf(flameSearch) >= 0;
  }

  // The bytes under frames that match the search, each path counted once.
  function matchedBytes(node) {
    if (matches(node)) return node.v;
    var sum = 0;
    (node.c || []).forEach(function (c) { sum += matchedBytes(c); });
    return sum;
  }

  function flatten(root) {
    var items = [];
    var depth = 0;
    (function walk(node, d, x0) {
      depth = Math.max(depth, d);
      var color = KIND_COLORS[node.k] ? KIND_COLORS[node.k](hash(node.n)) : "#999";
      if (flameSearch !== "" && !matches(node)) color = "#e4e4e4";
      items.push({node: node, value: [d, x0, x0 + node.v], itemStyle: {color: color}});
      var x = x0;
      (node.c || []).forEach(function (child) { walk(child, d + 1, x); x += child.v; });
    })(root, 0, 0);
    return {items: items, depth: depth};
  }

  function drawFlame() {
    var view = data.flames[flameView];
    var root = flameStack.length ? flameStack[flameStack.length - 1] : view.tree;
    var flat = flatten(root);
    var div = document.getElementById("flame");
    div.style.height = Math.max(120, (flat.depth + 1) * 22 + 16) + "px";
    var found = flameSearch === "" ? "" : "; matching \u201c" + flameSearch + "\u201d: " +
      human(matchedBytes(root)) + (root.v ? " (" + (100 * matchedBytes(root) / root.v).toFixed(1) +
      "%)" : "");
    document.getElementById("flame-total").textContent =
      (flameStack.length ? shortName(root) + ": " + human(root.v) + " of " : "") +
      view.total_text + found + (flameStack.length ? " (click the top bar to go back up)" : "");
    if (flameChart === null) {
      flameChart = echarts.init(div, null, {renderer: "canvas"});
      track(flameChart);
      flameChart.on("click", function (p) {
        var item = p.data && p.data.node;
        if (!item) return;
        if (p.dataIndex === 0 && flameStack.length) flameStack.pop();
        else if (p.dataIndex !== 0 && item.c) flameStack.push(item);
        else return;
        drawFlame();
      });
    } else {
      flameChart.resize();
    }
    flameChart.setOption({
      animation: false,
      grid: {left: 4, right: 4, top: 4, bottom: 4},
      tooltip: {
        confine: true,
        formatter: function (p) {
          var n = p.data.node;
          var share = root.v ? (100 * n.v / root.v).toFixed(1) : "0";
          return "<b>" + echarts.format.encodeHTML(n.n) + "</b><br>" + human(n.v) +
            " (" + share + "% of this view)" +
            (n.k === "py" ? "<br>Python frame" : n.k === "native" ? "<br>native frame" :
             n.k === "api" ? "<br>the allocating call" : "");
        }
      },
      xAxis: {type: "value", show: false, min: 0, max: Math.max(root.v, 1)},
      yAxis: {type: "value", show: false, inverse: true, min: -0.5, max: flat.depth + 0.5},
      series: [{
        type: "custom",
        renderItem: function (params, api) {
          var d = api.value(0);
          var start = api.coord([api.value(1), d]);
          var end = api.coord([api.value(2), d]);
          var height = api.size([0, 1])[1];
          var width = Math.max(end[0] - start[0] - 1, 0.5);
          var node = flat.items[params.dataIndex].node;
          return {
            type: "rect",
            shape: {x: start[0], y: start[1] - height / 2, width: width, height: height - 2},
            style: {fill: api.visual("color")},
            textContent: {style: {text: width > 30 ? shortName(node) : "", fill: "#1a1a1a",
                                  fontSize: 11, overflow: "truncate", width: width - 6}},
            textConfig: {position: "insideLeft"}
          };
        },
        encode: {x: [1, 2], y: 0},
        data: flat.items
      }]
    }, true);
  }

  function flames() {
    var select = document.getElementById("flame-view");
    data.flames.forEach(function (f, i) {
      select.appendChild(el("option", {value: String(i)}, f.name + " (" + f.total_text + ")"));
    });
    select.addEventListener("change", function () {
      flameView = Number(select.value);
      flameStack = [];
      drawFlame();
    });
    var search = document.getElementById("flame-search");
    search.addEventListener("input", function () {
      flameSearch = search.value.trim().toLowerCase();
      drawFlame();
    });
    drawFlame();
  }

  function showFlame(index) {
    var select = document.getElementById("flame-view");
    select.value = String(index);
    flameView = index;
    flameStack = [];
    drawFlame();
    document.getElementById("flames").scrollIntoView();
  }

  // ------------------------------------------------------- OOM details

  function table(rows, heading) {
    var t = el("table");
    var head = el("tr");
    [heading, "allocations", "bytes"].forEach(function (h) { head.appendChild(el("th", {}, h)); });
    t.appendChild(head);
    rows.forEach(function (r) {
      var tr = el("tr");
      tr.appendChild(el("td", {}, r[0]));
      tr.appendChild(el("td", {"class": "num"}, String(r[2])));
      tr.appendChild(el("td", {"class": "num"}, human(r[1])));
      t.appendChild(tr);
    });
    return t;
  }

  function ooms() {
    var box = document.getElementById("ooms");
    var any = false;
    data.lanes.forEach(function (lane) {
      lane.ooms.forEach(function (o) {
        any = true;
        var card = el("section", {"class": "oom-card"});
        card.appendChild(el("h3", {}, lane.label + " \u2014 " + lane.device + " at " + seconds(o.t) +
          ": " + o.function + " of " + o.size_text + " failed (" + o.error + ")"));
        var facts = "live on the device then: " + human(o.live_bytes);
        if (o.device_free !== null && o.device_total !== null) {
          facts += "; the driver said " + human(o.device_free) + " free of " + human(o.device_total);
        }
        card.appendChild(el("p", {}, facts));
        if (o.by_library.length) card.appendChild(table(o.by_library, "calling library"));
        if (o.by_python_site.length) card.appendChild(table(o.by_python_site, "Python call site"));
        if (o.flame !== null) {
          var b = el("button", {type: "button"}, "what was live, as a flame graph");
          b.addEventListener("click", function () { showFlame(1 + o.flame); });
          card.appendChild(b);
        }
        box.appendChild(card);
      });
    });
    document.getElementById("oom-section").hidden = !any;
  }

  try {
    if (typeof echarts === "undefined") throw new Error("the charting library did not load");
    header();
    lanes();
    ooms();
    flames();
  } catch (e) {
    fail(e && e.message ? e.message : e);
  }
})();
