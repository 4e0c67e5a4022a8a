// Charts of the node and pool pages, drawn with the plotly.js the plotly package ships. Their data is in a
// <script type="application/json" id="chart-data"> block of the page (data, not code: the CSP allows no inline script).
(function () {
  "use strict";
  const holder = document.getElementById("chart-data");
  if (!holder || !window.Plotly) return;
  const data = JSON.parse(holder.textContent);
  const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
  const axisUnits = { ratio: "%", bytes: "bytes", bytes_per_second: "B/s", seconds: "s", watts: "W", celsius: "°C",
    per_second: "per second", requests: "requests" };

  function layout(title, unit, extra) {
    return Object.assign({
      title: { text: title, font: { size: 13 }, x: 0.02 },
      margin: { l: 56, r: 12, t: 36, b: 36 }, height: 260,
      xaxis: { type: "date", gridcolor: "#eef0f2" },
      yaxis: { title: { text: unit, font: { size: 11 } }, gridcolor: "#eef0f2", rangemode: "tozero",
        tickformat: unit === "%" ? ".0%" : "" },
      legend: { orientation: "h", y: -0.2, font: { size: 11 } },
      paper_bgcolor: "#fff", plot_bgcolor: "#fff", font: { family: "system-ui, sans-serif", size: 11 },
    }, extra || {});
  }

  function empty(traces) {
    return traces.every(function (t) { return !t.x || t.x.length === 0; });
  }

  function draw(div, traces, chartLayout) {
    if (empty(traces)) {
      div.innerHTML = "";
      const note = document.createElement("p");
      note.className = "empty chart-empty";
      note.textContent = chartLayout.title.text + ": no data yet";
      div.appendChild(note);
      return;
    }
    Plotly.newPlot(div, traces, chartLayout, config);
  }

  function nodeCharts() {
    const box = document.getElementById("node-charts");
    Object.keys(data.charts).forEach(function (metric) {
      const div = document.createElement("div");
      div.className = "chart";
      div.dataset.chart = metric;
      box.appendChild(div);
      const traces = data.charts[metric].map(function (t) {
        return { x: t.x, y: t.y, name: t.name, type: "scatter", mode: "lines", line: { width: 1.5 } };
      });
      draw(div, traces, layout(data.titles[metric], axisUnits[data.units[metric]] || ""));
    });
  }

  function poolCharts() {
    const r = data.replicas;
    const replicas = [
      { x: r.running.x, y: r.running.y, name: "running (ready + starting)", mode: "lines", line: { shape: "hv", color: "#9db7ee" } },
      { x: r.ready.x, y: r.ready.y, name: "ready", mode: "lines", line: { shape: "hv", color: "#2f8f4e", width: 2 } },
      { x: r.desired.x, y: r.desired.y, name: "desired", mode: "lines+markers", line: { shape: "hv", dash: "dot", color: "#a86300" } },
    ];
    draw(document.querySelector('[data-chart="replicas"]'), replicas,
      layout("Replicas, last 30 min", "replicas", { yaxis: { rangemode: "tozero", dtick: 1, gridcolor: "#eef0f2" } }));
    const d = data.demand;
    const demand = [{ x: d.actual.x, y: d.actual.y, name: "demand", mode: "lines", line: { color: "#2457c5" } }];
    if (d.forecast) {
      demand.push({ x: d.forecast.x, y: d.forecast.hi, name: "90% band", mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
      demand.push({ x: d.forecast.x, y: d.forecast.lo, name: "90% band", mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: "rgba(36,87,197,0.15)" });
      demand.push({ x: d.forecast.x, y: d.forecast.yhat, name: "forecast", mode: "lines", line: { dash: "dash", color: "#2457c5" } });
    }
    if (d.capacity) demand.push({ x: d.capacity.x, y: d.capacity.y, name: "capacity (ready × per replica)", mode: "lines", line: { shape: "hv", color: "#b42318" } });
    if (d.limit) demand.push({ x: d.limit.x, y: d.limit.y, name: "capacity ahead", mode: "lines", line: { dash: "dot", color: "#b42318" } });
    draw(document.querySelector('[data-chart="demand"]'), demand,
      layout("Demand against capacity, with the forecast", data.unit));
  }

  const kind = document.querySelector("[data-kind]");
  if (kind && kind.dataset.kind === "node") nodeCharts();
  if (kind && kind.dataset.kind === "pool") poolCharts();
})();
