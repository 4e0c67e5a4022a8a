// The node and pool pages' charts, drawn with uPlot (vendored in /static/vendor with its MIT licence). Their data is
// in a <script type="application/json" id="chart-data"> block (data, not code: the CSP allows no inline script), as
// tables of aligned columns (web/dashboard/charts.py). On a live range live.js hands each server-sent event to
// FleetCharts.push: its tables' new points are appended, what fell out of the window is dropped, and uPlot redraws
// from the same chart objects (nothing is rebuilt unless a new line appears).
(function () {
  "use strict";
  const holder = document.getElementById("chart-data");
  const box = document.querySelector("[data-kind]");
  if (!holder || !box || !window.uPlot) return;
  const data = JSON.parse(holder.textContent);
  const win = data.window;
  let now = win.now;

  const PALETTE = ["#2457c5", "#c2410c", "#2f8f4e", "#7c3aed", "#0e7490", "#a16207", "#be185d", "#475467"];
  const COLORS = { running: "#9db7ee", ready: "#2f8f4e", desired: "#a86300", demand: "#2457c5",
    capacity: "#b42318", forecast: "#2457c5", hi: "#2457c5", lo: "#2457c5", limit: "#b42318" };
  const BAND_FILL = "rgba(36, 87, 197, 0.15)";
  const HEIGHT = 220;
  const GAP_MIN_SECONDS = 5;  // a live line breaks where no sample came for 5 s (ten of the agent's 500 ms)

  // Units as the cards write them (web/dashboard/units.py), scaled for the largest figure shown.
  const BINARY = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  const DECIMAL = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
  function scaled(units, base, top) {
    let i = 0, div = 1;
    while (Math.abs(top) >= base * div && i < units.length - 1) { div *= base; i += 1; }
    return { div: div, suffix: " " + units[i] };
  }
  function scaleFor(unit, top) {
    switch (unit) {
      case "ratio": return { div: 0.01, suffix: " %" };
      case "bytes": return scaled(BINARY, 1024, top);
      case "bytes_per_second": return scaled(DECIMAL, 1000, top);
      case "seconds":
        if (Math.abs(top) < 1) return { div: 0.001, suffix: " ms" };
        return Math.abs(top) < 120 ? { div: 1, suffix: " s" } : { div: 60, suffix: " min" };
      case "watts": return { div: 1, suffix: " W" };
      case "celsius": return { div: 1, suffix: " °C" };
      case "per_second": return { div: 1, suffix: " /s" };
      case "requests": return { div: 1, suffix: " req" };
      default: return { div: 1, suffix: "" };
    }
  }
  function decimals(step) {  // the fewest that write the tick step exactly: 2.5 kB/s steps read 2.5, 5.0, 7.5
    for (let d = 0; d < 3; d += 1) {
      if (Math.abs(Math.round(step * Math.pow(10, d)) - step * Math.pow(10, d)) < 1e-6) return d;
    }
    return 3;
  }
  function tickText(unit, splits) {
    const top = Math.max.apply(null, splits.map(Math.abs));
    const s = scaleFor(unit, top);
    const step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) / s.div : 1;
    return splits.map(function (v) { return (v / s.div).toFixed(decimals(step)) + s.suffix; });
  }
  function valueText(unit, v) {
    if (v === null || v === undefined) return "—";
    const s = scaleFor(unit, v);
    const x = v / s.div;
    return (Math.abs(x) >= 100 ? x.toFixed(0) : String(Number(x.toPrecision(3)))) + s.suffix;
  }
  // The y-range: a ratio is 0–100 %; else from 0 to a little over the top, and a flat line (one point, all zero)
  // still gets an axis that reads as its unit rather than "0 0 0 0".
  function yRange(unit) {
    return function (u, min, max) {
      if (unit === "ratio") return [0, 1];
      if (min === null || max === null || !isFinite(min) || !isFinite(max)) return [0, 1];
      const lo = Math.min(0, min);
      let hi = Math.max(0, max);
      if (unit === "replicas") return [lo, hi + 1];
      hi = hi > lo ? hi + (hi - lo) * 0.08 : lo + (unit === "seconds" ? 0.01 : 1);
      return [lo, hi];
    };
  }

  // Times in UTC, as every other time on the dashboard: 16:40, or 16:40:30 where ticks are under a minute apart.
  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function clock(ts, seconds) {
    const d = new Date(ts * 1000);
    const hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    return seconds ? hm + ":" + pad(d.getUTCSeconds()) : hm;
  }
  function timeTicks(u, splits) {
    const step = splits.length > 1 ? splits[1] - splits[0] : 60;
    return splits.map(function (v) { return clock(v, step < 60); });
  }
  // Bytes tick at binary steps (256 KiB, 1 GiB), so their labels are round in KiB/MiB/GiB.
  const BINARY_INCRS = [];
  for (let k = 0; k < 6; k += 1) [1, 2, 4, 8, 16, 32, 64, 128, 256, 512].forEach(function (m) { BINARY_INCRS.push(m * Math.pow(1024, k)); });

  function nameOf(key) {  // a line the page did not have yet: as the server names it (pages/nodes.py)
    if (key.indexOf("gpu-") === 0) return "GPU " + key.slice(4);
    if (key.indexOf("pool-") === 0) return "pool " + key.slice(5);
    return key;
  }

  function fromPayload(t) {
    const cols = {};
    t.keys.forEach(function (key, i) { cols[key] = t.y[i].slice(); });
    const x = t.x.map(function (ms) { return t.origin + ms / 1000; });
    return { keys: t.keys.slice(), x: x, cols: cols, merge: t.merge };
  }

  // A table as uPlot columns: null (no point of that line at that time) becomes undefined, which uPlot spans, and
  // an explicit null is put where the table has no point for three of its usual intervals, which uPlot breaks at.
  function columns(t) {
    const deltas = [];
    for (let i = 1; i < t.x.length; i += 1) deltas.push(t.x[i] - t.x[i - 1]);
    deltas.sort(function (a, b) { return a - b; });
    const gap = Math.max(GAP_MIN_SECONDS, 3 * (deltas.length ? deltas[deltas.length >> 1] : 0));
    const xs = [], ys = t.keys.map(function () { return []; });
    for (let i = 0; i < t.x.length; i += 1) {
      if (t.merge && i > 0 && t.x[i] - t.x[i - 1] > gap) {
        xs.push((t.x[i] + t.x[i - 1]) / 2);
        ys.forEach(function (col) { col.push(null); });
      }
      xs.push(t.x[i]);
      t.keys.forEach(function (key, k) { const v = t.cols[key][i]; ys[k].push(v === null ? undefined : v); });
    }
    return [xs].concat(ys);
  }

  function aligned(chart) {
    const tables = chart.tables.map(columns);
    return tables.length === 1 ? tables[0] : uPlot.join(tables);
  }

  function seriesFor(chart, key, index) {
    const line = chart.lines[key] || { name: nameOf(key), style: "line" };
    const color = COLORS[key] || PALETTE[index % PALETTE.length];
    const s = { label: line.name, stroke: color, width: 1.5, spanGaps: false,
      value: function (u, v) { return valueText(chart.unit, v); } };
    if (line.style === "step" || line.style === "step-dash") s.paths = uPlot.paths.stepped({ align: 1 });
    if (line.style === "step-dash" || line.style === "dash") s.dash = [6, 4];
    if (line.style === "limit") s.dash = [2, 3];
    if (line.style === "band") { s.stroke = "transparent"; s.width = 0; }
    if (key === "ready") s.width = 2;
    return s;
  }

  function draw(chart) {
    const keys = [];
    chart.tables.forEach(function (t) { t.keys.forEach(function (k) { keys.push(k); }); });
    const series = [{ value: function (u, v) { return v === null ? "—" : clock(v, true) + " UTC"; } }]
      .concat(keys.map(function (k, i) { return seriesFor(chart, k, i); }));
    const bands = [];
    const hi = keys.indexOf("hi"), lo = keys.indexOf("lo");
    if (hi >= 0 && lo >= 0) bands.push({ series: [hi + 1, lo + 1], fill: BAND_FILL });
    const yAxis = { size: 72, grid: { stroke: "#eef0f2" },
      values: function (u, splits) { chart.yTicks = tickText(chart.unit, splits); return chart.yTicks; } };
    if (chart.unit === "replicas") yAxis.incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
    if (chart.unit === "bytes") yAxis.incrs = BINARY_INCRS;
    const opts = {
      title: chart.title, width: Math.max(280, chart.div.clientWidth - 2), height: HEIGHT,
      scales: { x: { time: true, range: function () { return [now - win.seconds, now + win.ahead]; } },
        y: { range: yRange(chart.unit) } },
      axes: [{ grid: { stroke: "#eef0f2" }, values: timeTicks, label: "UTC", labelSize: 16, labelFont: "11px system-ui, sans-serif" }, yAxis],
      series: series, bands: bands, cursor: { drag: { x: false, y: false } },
      hooks: { draw: [function (u) { mark(chart, u); }] },
    };
    if (chart.plot) chart.plot.destroy();
    chart.keys = keys.join(",");
    chart.plot = new uPlot(opts, aligned(chart), chart.div);
  }

  // What tests and people can read off a drawn chart: the points its histories hold, its y labels, the seconds its
  // x-axis spans, its lines; and "no data yet" over one with nothing to draw.
  function mark(chart, u) {
    const points = chart.tables.reduce(function (n, t) { return n + (t.merge ? t.x.length : 0); }, 0);
    const drawn = chart.tables.some(function (t) { return t.x.length > 0; });
    chart.div.dataset.points = String(points);
    chart.div.dataset.yTicks = (chart.yTicks || []).join("|");
    chart.div.dataset.xSpan = String(Math.round(u.scales.x.max - u.scales.x.min));
    chart.div.dataset.keys = chart.keys;
    chart.empty.hidden = drawn;
  }

  function redraw(chart) {
    const keys = [];
    chart.tables.forEach(function (t) { t.keys.forEach(function (k) { keys.push(k); }); });
    if (keys.join(",") !== chart.keys) { draw(chart); return; }
    chart.plot.setData(aligned(chart));
  }

  // A live table: drop its points from the tail's first time on (a bucket still filling is sent again), append the
  // tail, and drop what fell out of the window. A table that is not appended to (a forecast) is replaced whole.
  function merge(table, tail) {
    if (!table.merge) { table.keys = tail.keys; table.x = tail.x; table.cols = tail.cols; return; }
    if (tail.x.length === 0) return;
    let cut = table.x.length;
    while (cut > 0 && table.x[cut - 1] >= tail.x[0] - 1e-6) cut -= 1;
    tail.keys.forEach(function (key) {
      if (table.keys.indexOf(key) < 0) { table.keys.push(key); table.cols[key] = table.x.map(function () { return null; }); }
    });
    table.x.splice(cut);
    table.keys.forEach(function (key) {
      const col = table.cols[key];
      col.splice(cut);
      const add = tail.cols[key];
      tail.x.forEach(function (_x, i) { col.push(add ? add[i] : null); });
    });
    tail.x.forEach(function (x) { table.x.push(x); });
    let old = 0;
    while (old < table.x.length && table.x[old] < now - win.seconds) old += 1;
    if (old > 0) {
      table.x.splice(0, old);
      table.keys.forEach(function (key) { table.cols[key].splice(0, old); });
    }
  }

  const charts = {};
  function create(spec) {
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.chart = spec.id;
    const empty = document.createElement("p");
    empty.className = "empty chart-empty";
    empty.textContent = "no data in the last " + win.label + " yet";
    div.appendChild(empty);
    box.appendChild(div);
    const chart = { id: spec.id, title: spec.title, unit: spec.unit, lines: spec.lines, div: div, empty: empty,
      tables: spec.tables.map(fromPayload) };
    charts[spec.id] = chart;
    draw(chart);
    return chart;
  }
  data.charts.forEach(create);

  function push(event) {
    if (typeof event.now === "number") now = event.now;
    const tails = event.charts || {};
    Object.keys(tails).forEach(function (id) {
      const chart = charts[id];
      if (!chart) {  // a metric the node had no point of when the page loaded: drawn from its first points
        const meta = (data.meta || {})[id];
        if (!meta || !tails[id].length) return;
        create({ id: id, title: meta.title, unit: meta.unit, lines: {}, tables: tails[id] });
        const note = document.getElementById("charts-empty");
        if (note) note.hidden = true;
        return;
      }
      tails[id].forEach(function (t) {
        const tail = fromPayload(t);
        const table = chart.tables.find(function (own) { return own.keys[0] === tail.keys[0]; });
        if (table) merge(table, tail);
        else chart.tables.push(tail);  // a line that starts now: a forecast, a capacity once it is known
      });
    });
    Object.keys(charts).forEach(function (id) { redraw(charts[id]); });
  }

  window.addEventListener("resize", function () {
    Object.keys(charts).forEach(function (id) {
      const c = charts[id];
      c.plot.setSize({ width: Math.max(280, c.div.clientWidth - 2), height: HEIGHT });
    });
  });
  window.FleetCharts = { live: win.live, since: data.since, push: push };
})();
