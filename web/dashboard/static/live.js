// Live pages (node, pool): one server-sent event every 500 ms (node) or second (pool). The server formats each value
// with its unit, so this only swaps text; a live chart range also gets the event's new points (charts.js).
(function () {
  "use strict";
  const main = document.querySelector("main[data-live-url]");
  if (!main || !window.EventSource) return;
  const flag = document.getElementById("live-flag");
  const charts = window.FleetCharts;
  let url = main.dataset.liveUrl;
  if (charts && charts.live && typeof charts.since === "number") {
    url += (url.indexOf("?") < 0 ? "?" : "&") + "since=" + encodeURIComponent(String(charts.since));
  }
  const source = new EventSource(url);
  const live = flag ? flag.textContent : "";  // "live every 500 ms", or a scraped node's interval, as rendered
  let events = 0;
  function text(id, value) {
    const el = document.getElementById(id);
    if (el && value !== undefined && el.textContent !== value) el.textContent = value;
  }
  source.onmessage = function (message) {
    const data = JSON.parse(message.data);
    if (data.values) {
      document.querySelectorAll("[data-series][data-metric]").forEach(function (cell) {
        const series = data.values[cell.dataset.series] || {};
        const shown = series[cell.dataset.metric] || "—";
        if (cell.textContent !== shown) cell.textContent = shown;
        const why = cell.nextElementSibling;  // why it is missing, shown only while it is
        if (why && why.classList.contains("why")) why.hidden = shown !== "—";
      });
    }
    if (data.status) {
      const status = document.getElementById("live-status");
      status.textContent = data.status;
      status.className = "badge " + data.status;
    }
    text("live-age", data.last_seen);
    text("pool-ready", data.ready);
    text("pool-desired", data.desired);
    if (charts && charts.live && data.charts) charts.push(data);
    events += 1;
    if (flag) {
      flag.dataset.events = String(events);
      flag.dataset.ts = data.ts === null || data.ts === undefined ? "" : String(data.ts);
      flag.textContent = live;
    }
  };
  source.onerror = function () {
    // a refusal (429: too many live pages open) closes the source for good; a dropped connection retries
    if (flag) flag.textContent =
      source.readyState === EventSource.CLOSED
        ? "live updates stopped: close other live pages, then reload"
        : "live updates paused: reconnecting";
  };
})();
